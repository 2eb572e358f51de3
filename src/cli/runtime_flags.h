// The runtime flags every verb that runs a model shares (declared once, here).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "model/forward.h"

namespace tq::cli {

inline void add_runtime_flags(CLI::App& app, RuntimeOptions* o) {
  app.add_flag(
      "--reference", o->reference,
      "run the f32 reference runtime (weights dequantized at load) instead of the fast one");
  app.add_option("--threads", o->threads, "fast runtime: threads in all (0: one per core)")
      ->capture_default_str();
  app.add_option(
         "--activations", o->activations,
         "fast runtime: auto (integer kernels below 48 tokens, f32 + OpenBLAS from 48 on), int8 "
         "(integer kernels wherever they exist: affine 4/8-bit) or f32")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, ActPath>{
              {"auto", ActPath::kAuto}, {"int8", ActPath::kInt8}, {"f32", ActPath::kF32}},
          CLI::ignore_case))
      ->default_str("auto");
}

}  // namespace tq::cli
