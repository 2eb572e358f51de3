#include "recipe/sensitivity.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "io/json_parse.h"

namespace tq {

namespace {

using nlohmann::json;

json spec_json(const QuantSpec& s) {
  return {{"mode", quant_mode_name(s.mode)}, {"bits", s.bits}, {"group_size", s.group_size}};
}

Result<QuantSpec> spec_from(const json& j, const std::string& where) {
  if (!j.is_object()) return err("{}: a spec is not an object", where);
  auto mode = quant_mode_from_name(j.at("mode").get<std::string>());
  if (!mode) return err("{}: unknown mode '{}'", where, j.at("mode").get<std::string>());
  QuantSpec s{*mode, j.at("bits").get<int>(), j.at("group_size").get<int>()};
  if (Status st = validate_quant_spec(s); !st.ok()) return err("{}: {}", where, st.error().message);
  return s;
}

Result<TensorRole> role_from_name(const std::string& name, const std::string& where) {
  for (int r = 0; r <= static_cast<int>(kLastTensorRole); ++r)
    if (tensor_role_name(static_cast<TensorRole>(r)) == name) return static_cast<TensorRole>(r);
  return err("{}: unknown role '{}'", where, name);
}

Result<SensitivityTable> parse(const json& j, const std::string& path) {
  SensitivityTable t;
  if (j.value("format", "") != "turboquant.sensitivity")
    return err("{}: not a sensitivity file (format is not \"turboquant.sensitivity\")", path);
  if (j.at("version").get<int>() != kSensitivityVersion)
    return err("{}: sensitivity version {} (this tool reads {})", path, j.at("version").get<int>(),
               kSensitivityVersion);
  t.model = j.at("model").get<std::string>();
  t.model_fingerprint = j.at("model_fingerprint").get<std::string>();
  t.family = j.at("family").get<std::string>();
  t.tie_word_embeddings = j.at("tie_word_embeddings").get<bool>();
  auto dt = dtype_from_name(j.at("dtype").get<std::string>());
  if (!dt || !dtype_is_float(*dt)) return err("{}: bad dtype", path);
  t.dtype = *dt;
  const json& c = j.at("calibration");
  t.calibration.source = c.at("source").get<std::string>();
  t.calibration.files = c.at("files").get<std::vector<std::string>>();
  t.calibration.sha256 = c.at("sha256").get<std::string>();
  t.calibration.seq_len = c.at("seq_len").get<int64_t>();
  t.calibration.windows = c.at("windows").get<int64_t>();
  t.calibration.tokens_scored = c.at("tokens_scored").get<int64_t>();
  for (const json& s : j.at("specs")) {
    TQ_TRY(QuantSpec q, spec_from(s, path + ": specs"));
    t.specs.push_back(q);
  }
  t.params_total = j.at("params_total").get<uint64_t>();
  t.fixed_params = j.at("fixed_params").get<uint64_t>();
  t.fixed_bytes = j.at("fixed_bytes").get<uint64_t>();
  if (auto r = j.find("rotation"); r != j.end() && !r->is_null()) {
    if (!r->is_object()) return err("{}: 'rotation' must be null or an object", path);
    t.rotation = *r;
  }
  t.scaled_above_bits = j.value("scaled_above_bits", 0);
  for (const json& m : j.at("modules")) {
    ModuleSensitivity ms;
    ms.name = m.at("name").get<std::string>();
    const std::string where = path + ": module " + ms.name;
    TQ_TRY(ms.role, role_from_name(m.at("role").get<std::string>(), where));
    ms.layer = m.at("layer").get<int64_t>();
    ms.shape = m.at("shape").get<Shape>();
    ms.params = m.at("params").get<uint64_t>();
    ms.float_bytes = m.at("float_bytes").get<uint64_t>();
    ms.seconds = m.at("seconds").get<double>();
    for (const json& s : m.at("specs")) {
      SpecKl k;
      TQ_TRY(k.spec, spec_from(s, where));
      k.kl = s.at("kl").get<double>();
      k.bytes = s.at("bytes").get<uint64_t>();
      k.scaled_from_bits = s.value("scaled_from_bits", 0);
      ms.specs.push_back(k);
    }
    t.modules.push_back(std::move(ms));
  }
  return t;
}

}  // namespace

const ModuleSensitivity* SensitivityTable::find(const std::string& name) const {
  for (const auto& m : modules)
    if (m.name == name) return &m;
  return nullptr;
}

json sensitivity_to_json(const SensitivityTable& t) {
  json specs = json::array();
  for (const QuantSpec& s : t.specs) specs.push_back(spec_json(s));
  json mods = json::array();
  for (const ModuleSensitivity& m : t.modules) {
    json ss = json::array();
    for (const SpecKl& k : m.specs) {
      json s = spec_json(k.spec);
      s["kl"] = k.kl;
      s["bytes"] = k.bytes;
      s["bpw"] = m.params ? 8.0 * static_cast<double>(k.bytes) / static_cast<double>(m.params) : 0;
      if (k.scaled_from_bits) s["scaled_from_bits"] = k.scaled_from_bits;
      ss.push_back(s);
    }
    mods.push_back({{"name", m.name},
                    {"role", tensor_role_name(m.role)},
                    {"layer", m.layer},
                    {"shape", m.shape},
                    {"params", m.params},
                    {"float_bytes", m.float_bytes},
                    {"seconds", m.seconds},
                    {"specs", ss}});
  }
  const CalibrationInfo& c = t.calibration;
  return {{"format", "turboquant.sensitivity"},
          {"version", kSensitivityVersion},
          {"model", t.model},
          {"model_fingerprint", t.model_fingerprint},
          {"family", t.family},
          {"tie_word_embeddings", t.tie_word_embeddings},
          {"method", "rtn"},
          {"metric", "mean_kl_nats"},
          {"dtype", dtype_name(t.dtype)},
          {"calibration",
           {{"source", c.source},
            {"files", c.files},
            {"sha256", c.sha256},
            {"seq_len", c.seq_len},
            {"windows", c.windows},
            {"tokens_scored", c.tokens_scored}}},
          {"specs", specs},
          {"params_total", t.params_total},
          {"fixed_params", t.fixed_params},
          {"fixed_bytes", t.fixed_bytes},
          {"rotation", t.rotation},
          {"scaled_above_bits", t.scaled_above_bits},
          {"modules", mods}};
}

Result<SensitivityTable> sensitivity_from_json(const json& j, const std::string& path) {
  try {
    return parse(j, path);
  } catch (const json::exception& e) {
    return err("{}: malformed sensitivity file: {}", path, e.what());
  }
}

Result<SensitivityTable> read_sensitivity(const std::string& path) {
  TQ_TRY(std::string text, read_text_file(path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return err("{}: not valid JSON", path);
  return sensitivity_from_json(j, path);
}

Status write_sensitivity(const std::string& path, const SensitivityTable& t) {
  const std::string tmp = path + ".tmp";
  const std::string text = sensitivity_to_json(t).dump(1) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return err("{}: cannot create: {}", tmp, std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return err("{}: write failed: {}", tmp, std::strerror(errno));
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return err("{}: flush failed", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return err("{}: cannot rename {} over it: {}", path, tmp, std::strerror(errno));
  return ok_status();
}

std::vector<AllocModule> alloc_modules(const SensitivityTable& t, bool with_float) {
  std::vector<AllocModule> out;
  const int scale_bytes = static_cast<int>(dtype_size(t.dtype));
  for (const ModuleSensitivity& m : t.modules) {
    AllocModule a;
    a.name = m.name;
    a.role = m.role;
    a.params = m.params;
    a.float_bytes = m.float_bytes;
    a.scale_bytes = scale_bytes;
    for (const SpecKl& k : m.specs) a.options.push_back({k.spec, k.kl, k.bytes, true});
    if (with_float) a.options.push_back({std::nullopt, 0.0, m.float_bytes, true});
    out.push_back(std::move(a));
  }
  return out;
}

Result<AllocPlan> allocate_from_table(const SensitivityTable& t, const AllocConstraints& cons,
                                      AllocBudget budget, bool with_float) {
  if (t.modules.empty()) return err("{}: the sensitivity table has no modules", t.model);
  if (budget.fixed_params == 0 && budget.fixed_bytes == 0) {
    budget.fixed_params = t.fixed_params;
    budget.fixed_bytes = t.fixed_bytes;
  }
  std::vector<AllocModule> mods = alloc_modules(t, with_float);
  return allocate(mods, cons, budget);
}

nlohmann::json alloc_plan_json(const AllocPlan& p) {
  json mods = json::array();
  std::map<std::string, int> counts;
  for (const AllocChoice& c : p.modules) {
    const std::string label = c.option.spec ? quant_spec_str(*c.option.spec) : "float";
    ++counts[label];
    mods.push_back({{"name", c.name},
                    {"role", tensor_role_name(c.role)},
                    {"spec", c.option.spec ? spec_json(*c.option.spec) : json(nullptr)},
                    {"kl", c.option.measured ? json(c.option.kl) : json(nullptr)},
                    {"bytes", c.option.bytes}});
  }
  return {{"bpw", p.bpw},
          {"bytes", p.bytes},
          {"params", p.params},
          {"budget_bytes", p.budget_bytes},
          {"predicted_kl", p.predicted_kl},
          {"exact", p.exact},
          {"unit_bytes", p.unit_bytes},
          {"unmeasured", p.unmeasured},
          {"spec_counts", counts},
          {"modules", mods}};
}

Result<std::vector<QuantSpec>> candidate_specs(const std::vector<std::string>& modes,
                                               const std::vector<int>& bits,
                                               const std::vector<int>& group_sizes) {
  std::vector<QuantSpec> out;
  for (const std::string& name : modes) {
    auto mode = quant_mode_from_name(name);
    if (!mode) return err("unknown mode '{}' (affine, mxfp4, nvfp4, mxfp8)", name);
    if (*mode == QuantMode::kAffine) {
      for (int g : group_sizes)
        for (int b : bits) {
          QuantSpec s{QuantMode::kAffine, b, g};
          if (Status st = validate_quant_spec(s); !st.ok()) return st.error();
          if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);  // 4,4: once
        }
    } else {
      out.push_back(default_spec_for_mode(*mode));
    }
  }
  if (out.empty()) return err("no candidate specs");
  return out;
}

}  // namespace tq
