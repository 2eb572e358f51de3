#include "eval/task_items.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/json_parse.h"

namespace tq::eval {
namespace {

using nlohmann::json;

const char* const kZeroShot[] = {"arc_easy",   "arc_challenge", "boolq",      "hellaswag",
                                 "openbookqa", "piqa",          "winogrande", "lambada"};

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
    out += s.substr(at, hit - at) + to;
  return out + s.substr(at);
}

// Python's str.capitalize on ASCII: the first letter up, every other letter down.
std::string capitalize(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) continue;
    s[i] = char(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

// Lines of a JSONL file, parsed; errors name file:line.
Result<std::vector<json>> read_jsonl(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return err("{}: cannot read the task file (run ./scripts/setup, which extracts the task sets)",
               path);
  std::vector<json> rows;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (strip(line).empty()) continue;
    TQ_TRY(json j, parse_json(line, fmt::format("{}:{}", path, n)));
    if (!j.is_object()) return err("{}:{}: a line must be a JSON object", path, n);
    rows.push_back(std::move(j));
  }
  if (rows.empty()) return err("{}: no items", path);
  return rows;
}

// Typed field access that errors instead of throwing.
struct Row {
  const json& j;
  const std::string& where;
  Result<std::string> str(const char* k) const {
    auto it = j.find(k);
    if (it == j.end() || !it->is_string()) return err("{}: '{}' must be a string", where, k);
    return it->get<std::string>();
  }
  Result<int64_t> num(const char* k) const {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_integer())
      return err("{}: '{}' must be an integer", where, k);
    return it->get<int64_t>();
  }
  Result<std::vector<std::string>> strs(const char* k) const {
    auto it = j.find(k);
    if (it == j.end() || !it->is_array() || it->empty())
      return err("{}: '{}' must be a non-empty array of strings", where, k);
    std::vector<std::string> v;
    for (const json& e : *it) {
      if (!e.is_string()) return err("{}: '{}' must hold strings", where, k);
      v.push_back(e.get<std::string>());
    }
    return v;
  }
};

Status check_gold(int64_t gold, size_t n, const std::string& where) {
  if (gold < 0 || size_t(gold) >= n) return err("{}: answer {} outside {} choices", where, gold, n);
  return ok_status();
}

// The harness's multiple-choice requests: one shared context, " " + choice per choice.
TaskItem shared_context_item(std::string context, std::vector<std::string> choices, int gold) {
  TaskItem it;
  for (const std::string& c : choices) it.requests.push_back({context, " " + c});
  it.choices = std::move(choices);
  it.gold = gold;
  return it;
}

std::string mmlu_question(const Row& r, const std::string& q, const std::vector<std::string>& c) {
  (void)r;
  return fmt::format("{}\nA. {}\nB. {}\nC. {}\nD. {}\nAnswer:", strip(q), c[0], c[1], c[2], c[3]);
}

const char* const kLetters[] = {"A", "B", "C", "D"};

Result<TaskItem> make_item(const std::string& name, const Row& r, const TaskOptions& o,
                           const std::map<std::string, std::string>& mmlu_shots,
                           const std::string& gsm_shots) {
  if (name == "arc_easy" || name == "arc_challenge" || name == "openbookqa") {
    TQ_TRY(std::string q, r.str("question"));
    TQ_TRY(auto choices, r.strs("choices"));
    TQ_TRY(int64_t gold, r.num("answer"));
    TQ_CHECK_OK(check_gold(gold, choices.size(), r.where));
    std::string ctx = name == "openbookqa" ? q : "Question: " + q + "\nAnswer:";
    return shared_context_item(ctx, choices, int(gold));
  }
  if (name == "piqa") {
    TQ_TRY(std::string goal, r.str("goal"));
    TQ_TRY(std::string s1, r.str("sol1"));
    TQ_TRY(std::string s2, r.str("sol2"));
    TQ_TRY(int64_t gold, r.num("label"));
    TQ_CHECK_OK(check_gold(gold, 2, r.where));
    return shared_context_item("Question: " + goal + "\nAnswer:", {s1, s2}, int(gold));
  }
  if (name == "boolq") {
    TQ_TRY(std::string passage, r.str("passage"));
    TQ_TRY(std::string q, r.str("question"));
    TQ_TRY(int64_t gold, r.num("label"));
    TQ_CHECK_OK(check_gold(gold, 2, r.where));
    return shared_context_item(passage + "\nQuestion: " + q + "?\nAnswer:", {"no", "yes"},
                               int(gold));
  }
  if (name == "hellaswag") {
    TQ_TRY(std::string label, r.str("activity_label"));
    TQ_TRY(std::string a, r.str("ctx_a"));
    TQ_TRY(std::string b, r.str("ctx_b"));
    TQ_TRY(auto endings, r.strs("endings"));
    TQ_TRY(int64_t gold, r.num("label"));
    TQ_CHECK_OK(check_gold(gold, endings.size(), r.where));
    for (std::string& e : endings) e = hellaswag_clean(e);
    return shared_context_item(hellaswag_clean(label + ": " + a + " " + capitalize(b)), endings,
                               int(gold));
  }
  if (name == "winogrande") {
    // Partial scoring: the context is the sentence up to the blank with each option filled in;
    // every option scores the same continuation, the rest of the sentence.
    TQ_TRY(std::string s, r.str("sentence"));
    TQ_TRY(std::string o1, r.str("option1"));
    TQ_TRY(std::string o2, r.str("option2"));
    TQ_TRY(int64_t answer, r.num("answer"));
    TQ_CHECK_OK(check_gold(answer - 1, 2, r.where));
    size_t blank = s.find('_');
    if (blank == std::string::npos) return err("{}: the sentence has no '_'", r.where);
    TaskItem it;
    std::string rest = " " + strip(s.substr(blank + 1));
    for (const std::string& opt : {o1, o2}) {
      it.choices.push_back(s.substr(0, blank) + opt);
      it.requests.push_back({it.choices.back(), rest});
    }
    it.gold = int(answer - 1);
    return it;
  }
  if (name == "mmlu") {
    TQ_TRY(std::string subject, r.str("subject"));
    TQ_TRY(std::string q, r.str("question"));
    TQ_TRY(auto choices, r.strs("choices"));
    TQ_TRY(int64_t gold, r.num("answer"));
    if (choices.size() != 4) return err("{}: MMLU needs 4 choices", r.where);
    TQ_CHECK_OK(check_gold(gold, 4, r.where));
    auto shots = mmlu_shots.find(subject);
    std::string ctx =
        fmt::format("The following are multiple choice questions (with answers) about {}.\n\n{}{}",
                    replace_all(subject, "_", " "), shots == mmlu_shots.end() ? "" : shots->second,
                    mmlu_question(r, q, choices));
    return shared_context_item(ctx, {"A", "B", "C", "D"}, int(gold));
  }
  if (name == "lambada") {
    TQ_TRY(std::string text, r.str("text"));
    size_t sp = text.rfind(' ');
    if (sp == std::string::npos) return err("{}: the text has no space", r.where);
    TaskItem it;
    it.requests.push_back({text.substr(0, sp), text.substr(sp)});
    return it;
  }
  if (name == "gsm8k") {
    TQ_TRY(std::string q, r.str("question"));
    TQ_TRY(std::string a, r.str("answer"));
    TaskItem it;
    size_t hash = a.rfind("####");
    it.answer = strip(hash == std::string::npos ? a : a.substr(hash + 4));
    it.prompt = o.chat ? q + "\n\nSolve it step by step, then end with \"The answer is N.\""
                       : gsm_shots + "Q: " + q + "\nA:";
    return it;
  }
  return err("unknown task '{}'", name);
}

// The harness's few-shot block: shots joined and closed by the "\n\n" delimiter.
Result<std::map<std::string, std::string>> mmlu_fewshot(const std::string& dir, int shots) {
  std::map<std::string, std::string> out;
  if (shots == 0) return out;
  const std::string path = dir + "/mmlu_dev.jsonl";
  TQ_TRY(std::vector<json> rows, read_jsonl(path));
  std::map<std::string, int> taken;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = fmt::format("{}:{}", path, i + 1);
    Row r{rows[i], where};
    TQ_TRY(std::string subject, r.str("subject"));
    TQ_TRY(std::string q, r.str("question"));
    TQ_TRY(auto choices, r.strs("choices"));
    TQ_TRY(int64_t gold, r.num("answer"));
    if (choices.size() != 4) return err("{}: MMLU needs 4 choices", where);
    TQ_CHECK_OK(check_gold(gold, 4, where));
    if (taken[subject]++ >= shots) continue;
    out[subject] += mmlu_question(r, q, choices) + " " + kLetters[gold] + "\n\n";
  }
  for (const auto& [subject, n] : taken)
    if (n < shots)
      return err("{}: {} has {} dev items, fewer than --shots {}", path, subject, n, shots);
  return out;
}

Result<std::string> gsm8k_fewshot(const std::string& dir, int shots) {
  if (shots == 0) return std::string();
  const std::string path = dir + "/gsm8k_fewshot.jsonl";
  TQ_TRY(std::vector<json> rows, read_jsonl(path));
  if (shots > int(rows.size()))
    return err("{}: {} exemplars, fewer than --shots {}", path, rows.size(), shots);
  std::string out;
  for (int i = 0; i < shots; ++i) {
    const std::string where = fmt::format("{}:{}", path, i + 1);
    Row r{rows[size_t(i)], where};
    TQ_TRY(std::string q, r.str("question"));
    TQ_TRY(std::string t, r.str("target"));
    out += "Q: " + q + "\nA: " + t + "\n\n";
  }
  return out;
}

std::string task_format(const std::string& name, int shots, bool chat) {
  if (name == "mmlu")
    return fmt::format("test, {}-shot{}, 'Q\\nA. ..\\nAnswer:' -> ' A'..' D'", shots,
                       shots > 0 ? " (first dev items of the subject)" : "");
  if (name == "lambada") return "test, context -> ' ' + last word; acc = all greedy, ppl";
  if (name == "gsm8k")
    return chat ? "test, 0-shot chat template, greedy <= 256 tokens, strict/flexible"
                : fmt::format(
                      "test, {}-shot CoT 'Q: ..\\nA:', greedy <= 256 tokens until 'Q:', "
                      "strict/flexible",
                      shots);
  const char* split =
      name == "arc_easy" || name == "arc_challenge" || name == "openbookqa" ? "test" : "validation";
  if (name == "winogrande") return fmt::format("{}, 0-shot, partial (option in context)", split);
  return fmt::format("{}, 0-shot", split);
}

}  // namespace

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {
      "arc_easy", "arc_challenge", "boolq",   "hellaswag", "openbookqa",
      "piqa",     "winogrande",    "lambada", "mmlu",      "gsm8k"};
  return names;
}

Result<std::vector<std::string>> parse_task_list(const std::string& list) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = std::min(list.find(',', at), list.size());
    std::string name = strip(list.substr(at, comma - at));
    at = comma + 1;
    if (name.empty()) continue;
    if (name == "zeroshot") {
      for (const char* n : kZeroShot) add(n);
    } else if (name == "all") {
      for (const std::string& n : task_names()) add(n);
    } else if (std::find(task_names().begin(), task_names().end(), name) != task_names().end()) {
      add(name);
    } else {
      std::string known;
      for (const std::string& n : task_names()) known += n + ", ";
      return err("unknown task '{}' (known: {}zeroshot, all)", name, known);
    }
  }
  if (out.empty()) return err("--task names no task");
  return out;
}

std::string default_eval_data_dir() {
  if (const char* d = std::getenv("TQ_EVAL_DATA"); d && *d) return d;
  if (const char* c = std::getenv("TQ_CACHE"); c && *c) return std::string(c) + "/eval";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/turboquant/eval";
}

std::vector<int64_t> seeded_subset(int64_t n, int64_t k, uint64_t seed) {
  std::vector<int64_t> idx(size_t(std::max<int64_t>(n, 0)));
  std::iota(idx.begin(), idx.end(), 0);
  if (k <= 0 || k >= n) return idx;
  // A partial Fisher-Yates with mt19937_64 (its sequence is fixed by the standard; the modulo
  // keeps the draw independent of the library's distributions).
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < k; ++i)
    std::swap(idx[size_t(i)], idx[size_t(i + int64_t(rng() % uint64_t(n - i)))]);
  idx.resize(size_t(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::string hellaswag_clean(const std::string& text) {
  std::string s = replace_all(strip(text), " [title]", ". ");
  std::string no_brackets;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      size_t close = s.find_first_of("]\n", i + 1);
      if (close != std::string::npos && s[close] == ']') {
        i = close;
        continue;
      }
    }
    no_brackets += s[i];
  }
  return replace_all(no_brackets, "  ", " ");
}

Result<Task> load_task(const std::string& name, const std::string& dir, const TaskOptions& o) {
  Task t;
  t.name = name;
  t.kind = name == "lambada" ? TaskKind::kLastWord
           : name == "gsm8k" ? TaskKind::kGenerate
                             : TaskKind::kChoice;
  t.chat = o.chat && name == "gsm8k";
  t.shots = o.shots >= 0 ? o.shots : (name == "gsm8k" && !t.chat ? 8 : 0);
  if (t.shots > 0 && name != "mmlu" && name != "gsm8k")
    return err("--shots {}: {} is zero-shot only (few-shot items exist for mmlu and gsm8k)",
               t.shots, name);
  if (t.chat && t.shots > 0)
    return err("--shots {}: GSM8K through the chat template is zero-shot", t.shots);
  std::map<std::string, std::string> mmlu_shots;
  std::string gsm_shots;
  if (name == "mmlu") {
    TQ_TRY(mmlu_shots, mmlu_fewshot(dir, t.shots));
  }
  if (name == "gsm8k" && !t.chat) {
    TQ_TRY(gsm_shots, gsm8k_fewshot(dir, t.shots));
  }
  const std::string path = dir + "/" + name + ".jsonl";
  TQ_TRY(std::vector<json> rows, read_jsonl(path));
  t.docs = int64_t(rows.size());
  for (int64_t i : seeded_subset(t.docs, o.limit, o.seed)) {
    const std::string where = fmt::format("{}:{}", path, i + 1);
    TQ_TRY(TaskItem it, make_item(name, Row{rows[size_t(i)], where}, o, mmlu_shots, gsm_shots));
    it.doc = i;
    t.items.push_back(std::move(it));
  }
  t.format = task_format(name, t.shots, t.chat);
  return t;
}

}  // namespace tq::eval
