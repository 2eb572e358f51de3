// libFuzzer: arbitrary bytes as a `tq eval` task file (eval/task_items.h; the first byte picks
// the task, the second the subset size) and as a model's GSM8K generation (eval/gsm8k_answer.h).
// Loading ends in items that agree with their task's kind, or in an error naming the problem;
// the answer extraction returns, never crashes.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "eval/gsm8k_answer.h"
#include "eval/task_items.h"

namespace {

const std::string& work_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/tq-eval-fuzz-XXXXXX";
    const char* d = mkdtemp(tmpl);
    return std::string(d != nullptr ? d : "/tmp");
  }();
  return dir;
}

void check_item(const tq::eval::Task& t, const tq::eval::TaskItem& it) {
  using tq::eval::TaskKind;
  if (t.kind == TaskKind::kChoice) {
    if (it.choices.empty() || it.requests.size() != it.choices.size()) __builtin_trap();
    if (it.gold < 0 || static_cast<size_t>(it.gold) >= it.choices.size()) __builtin_trap();
  } else if (t.kind == TaskKind::kLastWord) {
    if (it.requests.size() != 1 || it.requests[0].continuation.empty()) __builtin_trap();
  } else if (it.prompt.empty()) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The answer extraction on the bytes as a generation (bounded as a generation is).
  const std::string gen = text.substr(0, 4096);
  const std::string strict = tq::eval::gsm8k_strict(gen);
  const std::string flexible = tq::eval::gsm8k_flexible(gen);
  (void)tq::eval::gsm8k_match(strict, gen);
  (void)tq::eval::gsm8k_match(flexible, tq::eval::gsm8k_cut(gen));
  (void)tq::eval::hellaswag_clean(gen);
  if (size < 2) return 0;

  const auto& names = tq::eval::task_names();
  const std::string& name = names[data[0] % names.size()];
  tq::eval::TaskOptions o;
  o.shots = 0;  // few-shot blocks come from other files
  o.chat = (data[1] & 0x80) != 0;
  o.limit = data[1] & 0x0F;
  o.seed = data[1];
  const std::string path = work_dir() + "/" + name + ".jsonl";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data + 2, 1, size - 2, f);
  std::fclose(f);
  auto t = tq::eval::load_task(name, work_dir(), o);
  unlink(path.c_str());
  if (!t.ok()) {
    if (t.error().message.empty()) __builtin_trap();
    return 0;
  }
  if (t->items.empty() || t->docs <= 0) __builtin_trap();
  for (const auto& it : t->items) check_item(*t, it);
  return 0;
}
