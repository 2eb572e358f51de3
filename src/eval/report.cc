#include "eval/report.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "io/json_parse.h"
#include "model/model_source.h"

namespace tq::eval {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Artifact paths as the runs give them, compared by their absolute normal form.
std::string key_of(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : p.string();
}

std::string spec_label(const json& q) {
  const std::string mode = q.value("mode", "affine");
  const int bits = q.value("bits", 0), group = q.value("group_size", 0);
  if (mode == "affine") return fmt::format("affine {}-bit g{}", bits, group);
  return mode;
}

// "affine 4-bit g64", or "mixed: affine 3-bit g64 x120, affine 6-bit g64 x91" from the
// quantization block; the float dtype when there is none.
std::string recipe_of(const json& config, const std::string& storage) {
  auto it = config.find("quantization");
  if (it == config.end() || !it->is_object()) return storage;
  std::map<std::string, int> counts;
  for (const auto& [k, v] : it->items())
    if (v.is_object()) ++counts[spec_label(v)];
  if (counts.empty()) return spec_label(*it);
  if (counts.size() == 1 && counts.begin()->first == spec_label(*it)) return spec_label(*it);
  std::string s = "mixed:";
  for (const auto& [label, n] : counts) s += fmt::format(" {} x{},", label, n);
  s.pop_back();
  return s;
}

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// Each task's accuracy in an eval row's `which` metrics ("metrics" or "base_metrics").
void eval_accuracies(const json& result, const char* which, std::map<std::string, double>* out) {
  if (!result.contains("tasks") || !result["tasks"].is_array()) return;
  for (const json& t : result["tasks"]) {
    if (!t.is_object() || !t.contains(which) || !t[which].is_object()) continue;
    std::string name = t.value("task", "");
    if (name.empty()) continue;
    if (t.value("variant", "") == "chat") name += "_chat";
    const json& m = t[which];
    const char* key = m.contains("acc") ? "acc" : "strict";
    if (m.contains(key) && m[key].is_number()) (*out)[name] = m[key].get<double>();
  }
}

}  // namespace

std::optional<ArtifactInfo> probe_artifact(const std::string& path) {
  auto m = open_model(path);
  if (!m.ok()) return std::nullopt;
  ArtifactInfo a;
  SizeStats s = size_stats(*m->tensors);
  a.bpw = s.bpw;
  a.bytes = s.bytes;
  a.params = s.params;
  std::string storage = m->tensors->tensors().empty() ? "?" : m->tensors->tensors()[0].storage;
  for (const auto& t : m->tensors->tensors())
    if (t.name.find("layers.0.mlp.down_proj.weight") != std::string::npos) storage = t.storage;
  if (m->kind == SourceKind::kGguf) storage = "GGUF " + storage;
  a.recipe = recipe_of(m->config_json, storage);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto text = read_text_file((fs::path(path) / "tq_metadata.json").string());
    if (text.ok()) {
      json j = json::parse(*text, nullptr, false);
      if (!j.is_discarded()) a.metadata = j;
    }
  }
  return a;
}

std::string artifact_short_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::string n = std::filesystem::path(p).filename().string();
  return n.empty() ? p : n;
}

std::optional<double> json_number(const std::optional<nlohmann::json>& j, const char* key) {
  if (j && j->contains(key) && (*j)[key].is_number()) return (*j)[key].get<double>();
  return std::nullopt;
}

std::optional<double> ReportArm::bpw() const {
  if (info && info->bpw > 0) return info->bpw;
  return std::nullopt;
}
std::optional<double> ReportArm::mean_kl() const {
  if (kl && kl->contains("mean_kl") && (*kl)["mean_kl"].is_number())
    return (*kl)["mean_kl"].get<double>();
  return std::nullopt;
}
// A `tq ppl` row when there is one, else the candidate side of the `tq kl` row (same protocol).
std::optional<double> ReportArm::ppl_value() const {
  if (ppl && ppl->contains("ppl") && (*ppl)["ppl"].is_number()) return (*ppl)["ppl"].get<double>();
  if (kl && kl->contains("ppl_candidate") && (*kl)["ppl_candidate"].is_number())
    return (*kl)["ppl_candidate"].get<double>();
  return std::nullopt;
}
std::optional<double> ReportArm::ppl_se() const {
  if (ppl && ppl->contains("ppl")) {
    if (ppl->contains("ppl_se") && (*ppl)["ppl_se"].is_number())
      return (*ppl)["ppl_se"].get<double>();
    return std::nullopt;
  }
  if (kl && kl->contains("ppl_candidate_se") && (*kl)["ppl_candidate_se"].is_number())
    return (*kl)["ppl_candidate_se"].get<double>();
  return std::nullopt;
}

std::vector<ReportGroup> gather_report(const std::vector<RunRecord>& runs,
                                       const ArtifactProbe& probe) {
  // Every artifact named by a run, in first-seen order, and its display path.
  std::vector<std::string> order;
  std::map<std::string, std::string> shown;
  auto see = [&](const std::string& p) {
    std::string k = key_of(p);
    if (shown.emplace(k, p).second) order.push_back(k);
    return k;
  };
  std::map<std::string, std::optional<ArtifactInfo>> info;
  std::map<std::string, std::string> source;  // artifact -> source key
  std::map<std::string, json> ppl, bench, convert;
  std::map<std::pair<std::string, std::string>, json> kl;  // (artifact, base) -> latest
  std::map<std::string, std::map<std::string, double>> own_tasks, base_tasks;
  for (const RunRecord& r : runs) {          // ids ascend: later rows overwrite earlier ones
    if (r.kind == kServeLoadKind) continue;  // a server's measurement, its own section
    const std::string a = see(r.artifact);
    if (r.kind == "ppl") ppl[a] = r.result;
    if (r.kind == "bench") bench[a] = r.result;
    if (r.kind == "convert") {
      convert[a] = r.result;
      // The recorded source files the artifact even after its directory is gone.
      if (r.base_artifact && !source.count(a)) source[a] = see(*r.base_artifact);
    }
    if (r.kind == "eval") {
      eval_accuracies(r.result, "metrics", &own_tasks[a]);
      if (r.base_artifact) {
        const std::string b = see(*r.base_artifact);
        eval_accuracies(r.result, "base_metrics", &base_tasks[b]);
        if (!source.count(a)) source[a] = b;
      }
    }
    if (r.kind == "kl" && r.base_artifact) {
      const std::string b = see(*r.base_artifact);
      kl[{a, b}] = r.result;
      if (!source.count(a)) source[a] = b;
    }
  }
  for (const std::string& a : order) {
    info[a] = probe ? probe(shown[a]) : std::nullopt;
    auto& in = info[a];
    if (in && in->metadata && in->metadata->value("command", "") == "convert") {
      const json& m = *in->metadata;
      if (m.contains("source") && m["source"].is_object() && m["source"].contains("path") &&
          m["source"]["path"].is_string())
        source[a] = see(m["source"]["path"].get<std::string>());
    }
    if (!in && convert.count(a)) {  // artifact gone: the convert row still knows its size
      ArtifactInfo c;
      c.bpw = num(convert[a], "bpw");
      c.bytes = static_cast<uint64_t>(num(convert[a], "bytes"));
      c.params = static_cast<uint64_t>(num(convert[a], "params"));
      c.recipe = convert[a].value("recipe", "");
      in = c;
    }
  }
  // A source is its own group's member; chains (a converted artifact used as a base) resolve
  // to the root.
  auto root = [&](std::string k) {
    std::set<std::string> seen;
    while (source.count(k) && source[k] != k && seen.insert(k).second) k = source[k];
    return k;
  };
  std::vector<ReportGroup> groups;
  std::map<std::string, size_t> gi;
  for (const std::string& a : order) {
    const std::string s = root(a);
    if (!gi.count(s)) {
      gi[s] = groups.size();
      groups.push_back({shown[s], {}});
    }
    ReportArm arm;
    arm.artifact = shown[a];
    arm.info = info[a];
    if (ppl.count(a)) arm.ppl = ppl[a];
    if (bench.count(a)) arm.bench = bench[a];
    if (auto it = kl.find({a, s}); it != kl.end()) arm.kl = it->second;
    arm.tasks = base_tasks[a];
    for (const auto& [task, acc] : own_tasks[a]) arm.tasks[task] = acc;
    groups[gi[s]].arms.push_back(std::move(arm));
  }
  for (ReportGroup& g : groups)
    std::stable_sort(g.arms.begin(), g.arms.end(), [](const ReportArm& x, const ReportArm& y) {
      return x.bpw().value_or(1e9) < y.bpw().value_or(1e9);
    });
  return groups;
}

std::string task_summary(const ReportArm& a) {
  std::string s;
  for (const auto& [task, acc] : a.tasks)
    s += fmt::format("{}{} {:.1f}", s.empty() ? "" : ", ", task, 100 * acc);
  return s.empty() ? "-" : s;
}

std::vector<bool> pareto_front(const std::vector<std::pair<double, double>>& pts) {
  std::vector<bool> out(pts.size(), true);
  for (size_t i = 0; i < pts.size(); ++i)
    for (size_t j = 0; j < pts.size() && out[i]; ++j) {
      if (i == j) continue;
      const bool le = pts[j].first <= pts[i].first && pts[j].second <= pts[i].second;
      const bool lt = pts[j].first < pts[i].first || pts[j].second < pts[i].second;
      if (le && lt) out[i] = false;
    }
  return out;
}

}  // namespace tq::eval
