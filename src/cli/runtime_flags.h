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
  // A/B knobs; each also reads its environment variable when the flag is absent (validated the
  // same way), so a bench script can switch them for every verb it runs.
  app.add_option("--read-ahead", o->read_ahead,
                 "fast runtime: bytes each waiting thread reads ahead of the next product while "
                 "decoding (0: none)")
      ->envname("TQ_READ_AHEAD")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const bool digits = !v.empty() && v.size() <= 15 &&
                                v.find_first_not_of("0123456789") == std::string::npos;
            return digits ? ""
                          : "a byte count (0: none) is needed (flag or TQ_READ_AHEAD), "
                            "not '" +
                                v + "'";
          },
          "BYTES"))
      ->capture_default_str();
  auto on_off = [&app](const char* name, bool* dst, const char* env, const char* help) {
    app.add_option_function<std::string>(
           name, [dst](const std::string& v) { *dst = v == "on" || v == "1"; }, help)
        ->envname(env)
        ->check(CLI::Validator(
            [env](std::string& v) -> std::string {
              return v == "on" || v == "off" || v == "1" || v == "0"
                         ? ""
                         : std::string("on, off, 1 or 0 is needed (flag or ") + env + "), not '" +
                               v + "'";
            },
            "on|off"))
        ->default_str("on");
  };
  on_off("--tiles", &o->tiles, "TQ_TILES",
         "fast runtime: on: batches stay on the integer register tiles where they exist; off: "
         "they go to f32 + OpenBLAS from 48 tokens");
  on_off("--amx", &o->amx, "TQ_AMX",
         "fast runtime: on: int8 batches of 16+ tokens use AMX where the CPU has it");
  app.add_option_function<std::string>(
         "--prepack",
         [o](const std::string& v) {
           o->prepack = v == "auto"             ? Prepack::kAuto
                        : v == "on" || v == "1" ? Prepack::kOn
                        : v == "4bit"           ? Prepack::kFourBit
                                                : Prepack::kOff;
         },
         "fast runtime: 2/3/4-bit codes repacked at load for the AVX-512 VNNI lanes kernel, which "
         "then runs every batch size (auto: all where the weights fit the last-level cache, else "
         "an MLX directory's 4-bit ones on AMD CPUs; 4bit: the 4-bit ones only; tq serve: always)")
      ->envname("TQ_PREPACK")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v == "auto" || v == "on" || v == "off" || v == "4bit" || v == "1" || v == "0"
                       ? ""
                       : "auto, on, off, 4bit, 1 or 0 is needed (flag or TQ_PREPACK), not '" + v +
                             "'";
          },
          "auto|on|off|4bit"))
      ->default_str("auto");
}

}  // namespace tq::cli
