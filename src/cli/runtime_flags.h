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
  // Strings checked against their names, then mapped (CLI11 would print the enums as bytes).
  app.add_option_function<std::string>(
         "--activations",
         [o](const std::string& v) {
           o->activations = v == "int8"  ? ActPath::kInt8
                            : v == "f32" ? ActPath::kF32
                                         : ActPath::kAuto;
         },
         "fast runtime: auto (int8 where AMX takes batches of 16+ tokens and below 48 tokens, "
         "else f32 + OpenBLAS), int8 (integer kernels wherever they exist) or f32")
      ->check(CLI::IsMember({"auto", "int8", "f32"}, CLI::ignore_case))
      ->default_str("auto");
  app.add_option_function<std::string>(
         "--kv-cache",
         [o](const std::string& v) { o->kv_cache = v == "f32" ? KvType::kF32 : KvType::kF16; },
         "fast runtime: KV cache elements, f16 (half the bytes decode attention reads) or f32")
      ->check(CLI::IsMember({"f16", "f32"}, CLI::ignore_case))
      ->default_str("f16");
}

}  // namespace tq::cli
