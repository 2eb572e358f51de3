// The speculative-decoding flags of generate, bench and serve (declared once, here).
#pragma once

#include <CLI/CLI.hpp>

#include "model/speculate.h"

namespace tq::cli {

inline void add_spec_flags(CLI::App& app, SpecOptions* o) {
  app.add_flag("--lookup", o->lookup,
               "speculate with prompt lookup: n-grams of the text so far propose the next tokens "
               "(the same output, fewer forwards)");
  app.add_option("--draft", o->draft,
                 "speculate with this draft model (same vocabulary; e.g. a 3-bit convert)");
  app.add_option("--spec-k", o->k, "most proposals one step checks (adapted below it)")
      ->default_val(8);
  app.add_flag("--spec-fixed", o->fixed,
               "check --spec-k proposals at every step that has them, even where that is slower "
               "(no adaptation; for A/B runs)");
}

}  // namespace tq::cli
