// The speculative-decoding flags of generate, bench and serve (declared once, here), and the
// proposers they ask for.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>

#include "base/result.h"
#include "model/forward.h"
#include "model/model_source.h"
#include "model/model_tokenizer.h"
#include "model/speculate.h"

namespace tq::cli {

struct SpecFlags {
  bool lookup = false;
  std::string draft;
  int spec_k = 8;
  bool any() const { return lookup || !draft.empty(); }
};

inline void add_spec_flags(CLI::App& app, SpecFlags* f) {
  app.add_flag("--lookup", f->lookup,
               "speculate with prompt lookup: n-grams of the text so far propose the next tokens "
               "(the same output, fewer forwards)");
  app.add_option("--draft", f->draft,
                 "speculate with this draft model (same vocabulary; e.g. a 3-bit convert)");
  app.add_option("--spec-k", f->spec_k, "most proposals one step checks (adapted below it)")
      ->default_val(8);
}

// Makes a fresh Speculator per sequence (a draft's cache is per sequence; its weights are loaded
// once): null when no flag asks for speculation. `capacity`: positions a sequence may reach.
using SpeculatorFactory = std::function<Result<std::unique_ptr<Speculator>>()>;
inline Result<SpeculatorFactory> speculator_factory(const SpecFlags& f, const Transformer& model,
                                                    const Tokenizer& tok,
                                                    const RuntimeOptions& runtime,
                                                    int64_t capacity) {
  if (!f.any()) return SpeculatorFactory();
  if (f.lookup && !f.draft.empty()) return err("--lookup and --draft exclude each other");
  if (f.spec_k < 1 || f.spec_k > Speculator::kMaxK)
    return err("--spec-k must be in [1, {}], got {}", Speculator::kMaxK, f.spec_k);
  TQ_CHECK_OK(check_speculation(model));
  const int k = f.spec_k;
  auto costs = std::make_shared<StepCosts>();  // one model, one machine: learned once
  if (f.lookup)
    return SpeculatorFactory([k, costs]() -> Result<std::unique_ptr<Speculator>> {
      return std::make_unique<Speculator>(std::make_unique<LookupProposer>(), k, costs);
    });
  TQ_TRY(ModelSource d, open_model(f.draft));
  TQ_TRY(Tokenizer dtok, load_model_tokenizer(d));
  TQ_TRY(std::unique_ptr<Transformer> dm, Transformer::load(d, runtime));
  std::shared_ptr<const Transformer> draft = std::move(dm);
  // Checked once here, so that every sequence's proposer is known to be accepted.
  auto made = DraftProposer::make(draft, dtok, model, tok, capacity);
  if (!made) return err("--draft {}: {}", f.draft, made.error().message);
  return SpeculatorFactory([draft, capacity, k, costs]() -> Result<std::unique_ptr<Speculator>> {
    return std::make_unique<Speculator>(DraftProposer::unchecked(draft, capacity), k, costs);
  });
}

}  // namespace tq::cli
