#include "serve/metrics.h"

#include <fmt/format.h>

#include "base/proc_memory.h"

namespace tq::serve {

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++buckets_[i];
  ++count_;
  sum_us_ += static_cast<int64_t>(seconds * 1e6);
}

void Histogram::write(std::string& s, std::string_view name, std::string_view help) const {
  s += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  int64_t cum = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cum += buckets_[i].load();
    s += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], cum);
  }
  cum += buckets_[kBounds.size()].load();
  s += fmt::format("{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {1}\n", name, cum,
                   static_cast<double>(sum_us_.load()) / 1e6);
}

void Metrics::count_finish(std::string_view reason) {
  for (size_t i = 0; i < kFinish.size(); ++i)
    if (kFinish[i] == reason) ++finished[i];
}

void Metrics::count_http(int status) {
  size_t i = 0;
  while (i < kStatus.size() && kStatus[i] != status) ++i;
  ++http[i];
}

std::string Metrics::prometheus() const {
  std::string s;
  auto one = [&](std::string_view name, std::string_view type, std::string_view help, int64_t v) {
    s += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, v);
  };
  one("tq_requests_running", "gauge", "Sequences admitted and not finished.", running.load());
  one("tq_requests_waiting", "gauge", "Requests queued for admission.", waiting.load());
  one("tq_kv_cache_bytes", "gauge", "Bytes of the running sequences' KV caches.", kv_bytes.load());
  one("tq_kv_blocks_used", "gauge", "KV blocks (16 positions) the running sequences hold.",
      kv_blocks_used.load());
  one("tq_kv_blocks_total", "gauge", "KV blocks the memory budget allows (0: no limit).",
      kv_blocks_total.load());
  one("tq_memory_budget_bytes", "gauge", "Memory budget: weights, scratch and KV blocks.",
      memory_budget.load());
  one("tq_memory_fixed_bytes", "gauge",
      "Of the budget: weights, scratch and margins (the rest is KV blocks).", memory_fixed.load());
  one("tq_kv_block_bytes", "gauge", "Bytes of one KV block.", kv_block_bytes.load());
  one("tq_resident_bytes", "gauge", "Resident memory of the process now.",
      static_cast<int64_t>(resident_bytes()));
  one("tq_peak_resident_bytes", "gauge", "Most resident memory the process ever had.",
      static_cast<int64_t>(peak_resident_bytes()));
  one("tq_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
      prompt_tokens.load());
  one("tq_generation_tokens_total", "counter", "Tokens generated.", generation_tokens.load());
  one("tq_steps_total", "counter", "Batched forward passes.", steps.load());
  one("tq_step_tokens_total", "counter", "Tokens those passes carried.", step_rows.load());
  one("tq_prefill_allowance_tokens", "gauge",
      "Prompt tokens the last step with a prompt chunk could carry beside its decode rows "
      "(--max-itl-factor).",
      prefill_allowance.load());
  one("tq_spec_checks_total", "counter", "Decode rows that checked speculative proposals.",
      spec_checks.load());
  one("tq_spec_proposed_total", "counter", "Speculative proposals checked.", spec_proposed.load());
  one("tq_spec_accepted_total", "counter", "Speculative proposals the model agreed with.",
      spec_accepted.load());
  s += "# HELP tq_requests_finished_total Requests finished, by finish reason.\n"
       "# TYPE tq_requests_finished_total counter\n";
  for (size_t i = 0; i < kFinish.size(); ++i)
    s += fmt::format("tq_requests_finished_total{{finish_reason=\"{}\"}} {}\n", kFinish[i],
                     finished[i].load());
  s += "# HELP tq_http_responses_total HTTP responses, by status.\n"
       "# TYPE tq_http_responses_total counter\n";
  for (size_t i = 0; i <= kStatus.size(); ++i) {
    const std::string code = i < kStatus.size() ? std::to_string(kStatus[i]) : "other";
    s += fmt::format("tq_http_responses_total{{code=\"{}\"}} {}\n", code, http[i].load());
  }
  ttft.write(s, "tq_time_to_first_token_seconds", "Arrival to first token, per request.");
  itl.write(s, "tq_inter_token_latency_seconds", "Time between a sequence's consecutive tokens.");
  queue_time.write(s, "tq_queue_time_seconds", "Arrival to admission, per request.");
  if (prompt_cache != nullptr) {
    const PromptCacheStats c = prompt_cache->stats();
    one("tq_prompt_cache_queries_total", "counter", "Prompts looked up in the prompt cache.",
        c.queries);
    one("tq_prompt_cache_hits_total", "counter", "Lookups that reused at least one block.", c.hits);
    one("tq_prompt_cache_hit_tokens_total", "counter", "Prompt tokens not recomputed.",
        c.hit_tokens);
    one("tq_prompt_cache_evictions_total", "counter", "Blocks dropped from memory (LRU).",
        c.evictions);
    one("tq_prompt_cache_blocks", "gauge", "Blocks the prompt cache holds in memory.",
        c.memory_blocks);
    one("tq_prompt_cache_bytes", "gauge", "Bytes of those blocks.", c.memory_bytes);
    one("tq_prompt_cache_disk_blocks", "gauge", "Block files on disk.", c.disk_blocks);
    one("tq_prompt_cache_disk_bytes", "gauge", "Bytes of those files.", c.disk_bytes);
    one("tq_prompt_cache_disk_reads_total", "counter", "Blocks read back from disk (verified).",
        c.disk_reads);
    one("tq_prompt_cache_disk_writes_total", "counter", "Block files written.", c.disk_writes);
    one("tq_prompt_cache_disk_evictions_total", "counter", "Block files removed (disk bound).",
        c.disk_evictions);
    one("tq_prompt_cache_quarantined_total", "counter",
        "Block files that failed verification, moved to quarantine.", c.quarantined);
  }
  return s;
}

}  // namespace tq::serve
