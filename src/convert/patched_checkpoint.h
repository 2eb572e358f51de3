// A new checkpoint directory that differs from an existing MLX one only in the bytes of some
// stored tensors (same dtype and shape) and in tq_metadata.json: what `tq distill` writes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "io/checkpoint_dir.h"

namespace tq {

// The checks write_patched_checkpoint makes on `dest` before writing (StagingDir::check_dest,
// and `dest` is not `src_dir` itself): for callers that fail before long work.
Status check_patch_dest(const std::string& src_dir, const std::string& dest, bool force);

// Copies every regular file of `src`'s directory into a staging directory beside `dest`, with
// each stored tensor named in `replace` given its new bytes (their count must match) and
// `metadata` merged into tq_metadata.json's top level (created when absent), then publishes
// `dest` atomically (`force`: an existing `dest` is replaced).
Status write_patched_checkpoint(const DirTensorSource& src,
                                const std::map<std::string, std::vector<uint8_t>>& replace,
                                const nlohmann::json& metadata, const std::string& dest,
                                bool force);

}  // namespace tq
