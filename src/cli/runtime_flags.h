// The runtime flags every verb that runs a model shares (declared once, here).
#pragma once

#include <CLI/CLI.hpp>

#include "model/forward.h"

namespace tq::cli {

inline void add_runtime_flags(CLI::App& app, RuntimeOptions* o) {
  app.add_flag(
      "--reference", o->reference,
      "run the f32 reference runtime (weights dequantized at load) instead of the fast one");
  app.add_option("--threads", o->threads, "fast runtime: threads in all (0: one per core)")
      ->capture_default_str();
  app.add_flag("--int8", o->int8_activations,
               "fast runtime: quantize activations to int8 per block of 32 where an integer "
               "kernel exists (affine 4/8-bit)");
}

}  // namespace tq::cli
