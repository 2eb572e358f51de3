// The tq convert pipeline: source -> plan -> apply per layer -> write -> publish.
//   prepare_convert(): opens the source lazily, lets the transforms edit the config, builds and
//     validates the plan (everything --dry-run shows; no tensor data is read).
//   run_convert(): streams the globals, then one decoder layer at a time, through the
//     transforms and the quantizer into a ShardedWriter inside a StagingDir, writes config.json,
//     tokenizer files and tq_metadata.json, and publishes atomically.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "model/model_source.h"
#include "model/weight_stages.h"
#include "recipe/quant_plan.h"

namespace tq {

struct ConvertProgress {
  int64_t step = 0;        // groups done (globals, then one per decoder layer)
  int64_t steps = 0;       // total groups
  std::string what;        // "layer 3/30", "model.embed_tokens.weight"
  uint64_t bytes_in = 0;   // f32 bytes processed so far
  uint64_t bytes_out = 0;  // stored bytes written so far
  uint64_t bytes_out_total = 0;
  double elapsed_s = 0.0;
};

struct ConvertOptions {
  std::string source;
  std::string dest;
  std::optional<DType> dtype;  // default: default_quantized_dtype if any module is quantized,
                               // else default_output_dtype
  PlanOptions plan;            // plan.dtype and plan.recipe are filled in by prepare_convert
  std::string recipe;          // --recipe: a preset (mixed_3_6, ...) or a recipe JSON file
  uint64_t max_shard_bytes = 5ull << 30;
  bool force = false;
  bool record_timings = true;  // timings in tq_metadata.json (the only non-reproducible bytes)
  nlohmann::json options_record = nlohmann::json::object();  // the command line, for metadata
  nlohmann::json extra_metadata = nlohmann::json::object();  // top-level keys added to metadata
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by SIGINT) to stop and clean up
  // false: run the transforms and the quantizer over every group but write nothing (an mpirun
  // rank other than 0 in a GPTQ conversion: it only runs its calibration rows).
  bool write_output = true;
  std::function<void(const ConvertProgress&)> progress;
  // The user's source when `source` is a float model prepared from it (--channel-scale): the
  // default dtypes, tq_metadata.json's source and the results record follow it.
  std::string origin;
};

struct ConvertJob {
  ModelSource source;
  nlohmann::json config;  // output config.json (transforms applied, quantization not yet)
  QuantPlan plan;
  std::string dtype_reason;  // why plan.dtype: "given by --dtype", "default for quantized output"
  std::vector<WeightTransform*> transforms;  // not owned
  std::optional<ModelSource> origin;         // ConvertOptions::origin, opened
  const ModelSource& recorded_source() const { return origin ? *origin : source; }
};

// The float dtype a float-only conversion writes when --dtype is not given: the source's.
DType default_output_dtype(const ModelSource& src);
// The same for an output with quantized modules: f16 for an f16 source, else bf16.
DType default_quantized_dtype(const ModelSource& src);

Result<ConvertJob> prepare_convert(const ConvertOptions& opts,
                                   std::vector<WeightTransform*> transforms = {});

// Lines of the --dry-run plan: one per quantizable module plus totals.
std::vector<std::string> describe_plan(const ConvertJob& job);

struct ConvertSummary {
  std::string dest;
  SizeStats size;
  std::vector<std::string> files;  // names inside dest, sorted
  double seconds = 0.0;
  uint64_t bytes_in = 0;  // f32 bytes processed
};

Result<ConvertSummary> run_convert(ConvertJob& job, LayerQuantizer& quantizer,
                                   const ConvertOptions& opts);

// Output config.json content for a plan: the source config with the transforms' edits, mlx-lm's
// `quantization` and identical `quantization_config`, explicit tie_word_embeddings, rope_theta
// (+ rope_scaling translated from rope_parameters), torch_dtype of the output.
nlohmann::json output_config(const ConvertJob& job);

// Cheap, deterministic fingerprint of a source: SHA-256 over its config, file sizes and sampled
// blocks of every weight file (headers included).
Result<std::string> source_fingerprint(const ModelSource& src);

}  // namespace tq
