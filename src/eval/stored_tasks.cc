#include "eval/stored_tasks.h"

#include <fmt/format.h>

#include "base/sha256.h"

namespace tq::eval {
namespace {

using nlohmann::json;

// A length before each field, so that no two different items hash alike.
void put(Sha256& h, const std::string& s) {
  h.update(fmt::format("{}:", s.size()));
  h.update(s);
}

const json* field(const json& j, const char* name) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

bool is_string(const json* j, const std::string& want) {
  return j && j->is_string() && j->get<std::string>() == want;
}

// The task's metrics as summarize() names them, read back from a record's metrics object.
std::optional<std::vector<MetricValue>> read_metrics(const json* m, TaskKind kind) {
  if (!m || !m->is_object()) return std::nullopt;
  std::vector<MetricValue> out;
  for (int i = 0; i < 2; ++i) {
    std::string name = i == 1 && kind == TaskKind::kLastWord ? "ppl" : metric_name(kind, i);
    const json* v = field(*m, name.c_str());
    const json* se = field(*m, (name + "_se").c_str());
    if (!v || !se || !v->is_number() || !se->is_number()) return std::nullopt;
    out.push_back({name, {v->get<double>(), se->get<double>()}});
  }
  return out;
}

// [[doc, hit 0, hit 1], ...] in the task's item order.
std::optional<std::vector<ItemResult>> read_items(const json* a, const Task& t) {
  if (!a || !a->is_array() || a->size() != t.items.size()) return std::nullopt;
  std::vector<ItemResult> out;
  for (size_t i = 0; i < a->size(); ++i) {
    const json& x = (*a)[i];
    if (!x.is_array() || x.size() != 3 || !x[0].is_number_integer() ||
        x[0].get<int64_t>() != t.items[i].doc || !x[1].is_number_integer() ||
        !x[2].is_number_integer())
      return std::nullopt;
    ItemResult r;
    r.doc = t.items[i].doc;
    r.hit[0] = x[1].get<int>() != 0;
    r.hit[1] = x[2].get<int>() != 0;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

std::string task_items_sha256(const Task& t) {
  Sha256 h;
  put(h, t.name);
  for (const TaskItem& it : t.items) {
    h.update(fmt::format("doc {} gold {} requests {}\n", it.doc, it.gold, it.requests.size()));
    for (const LlRequest& r : it.requests) put(h, r.context), put(h, r.continuation);
    for (const std::string& c : it.choices) put(h, c);
    put(h, it.prompt);
    put(h, it.answer);
  }
  return h.hex_digest();
}

std::optional<StoredTask> find_stored_task(const std::vector<RunRecord>& runs, const Task& t,
                                           const StoredTaskKey& key) {
  for (auto run = runs.rbegin(); run != runs.rend(); ++run) {
    if (run->kind != "eval") continue;
    // The run's own model, then its base: each side has its runtime, protocol and items.
    for (const bool base : {false, true}) {
      const std::optional<std::string>& fp =
          base ? run->base_fingerprint : std::optional<std::string>(run->model_fingerprint);
      if (!fp || *fp != key.fingerprint) continue;
      if (!key.runtime.empty() &&
          !is_string(field(run->result, base ? "base_runtime" : "runtime"), key.runtime))
        continue;
      const json* tasks = field(run->result, "tasks");
      if (!tasks || !tasks->is_array()) continue;
      for (const json& j : *tasks) {
        if (!is_string(field(j, "task"), t.name) ||
            !is_string(field(j, "items_sha256"), key.items_sha256) ||
            !is_string(field(j, base ? "base_protocol" : "protocol"), key.protocol))
          continue;
        auto metrics = read_metrics(field(j, base ? "base_metrics" : "metrics"), t.kind);
        auto items = read_items(field(j, base ? "base_items" : "items"), t);
        if (!metrics || !items) continue;
        StoredTask s;
        s.run_id = run->id;
        s.time_utc = run->time_utc;
        s.scores.metrics = std::move(*metrics);
        s.scores.items = std::move(*items);
        return s;
      }
    }
  }
  return std::nullopt;
}

}  // namespace tq::eval
