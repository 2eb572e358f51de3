// tq bench --lookup / --draft: greedy decode of the same prompts with and without speculation,
// arms alternated per repeat, the tokens checked equal; decode speed, its ratio, acceptance and
// tokens per target forward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "model/forward.h"
#include "model/speculate.h"
#include "text/tokenizer.h"

namespace tq::eval {

// Prompts (user messages) used when none are given: three whose answers copy the prompt's text
// (a code edit, an extraction, a rewrite) and three open-ended ones.
const std::vector<std::string>& default_spec_prompts();

struct SpecBenchPrompt {
  std::string label;                       // the prompt's first words
  double plain_tok_s = 0, spec_tok_s = 0;  // medians over repeats
  int64_t tokens = 0;                      // generated (the same in both arms)
  SpecStats stats;                         // summed over repeats
};
struct SpecBenchResult {
  std::string proposer;
  std::vector<SpecBenchPrompt> prompts;
  double plain_tok_s = 0, spec_tok_s = 0;  // medians over prompts
};

// Each prompt decodes up to `gen` tokens, ending early at one of `eos` (an answer's end, as a
// user gets it; empty: exactly `gen`).
Result<SpecBenchResult> run_spec_bench(const Transformer& t, const Tokenizer& tok,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       const std::vector<std::string>& labels, int64_t gen,
                                       const std::vector<int32_t>& eos, int repeat,
                                       const SpeculatorFactory& make_spec,
                                       const std::function<void(int64_t, int64_t)>& progress);

nlohmann::json spec_bench_json(const SpecBenchResult& r);

}  // namespace tq::eval
