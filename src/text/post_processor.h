// tokenizer.json "post_processor" for one sequence: TemplateProcessing, RobertaProcessing,
// BertProcessing, ByteLevel (ids unchanged), Sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.h"

namespace tq::text {

struct PostProcessor {
  enum class Kind { kSequence, kTemplate, kIdentity };
  Kind kind = Kind::kIdentity;
  // Template for a single sequence: special-token ids, and the place of the sequence ($A).
  struct Piece {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  std::vector<Piece> pieces;
  std::vector<PostProcessor> children;

  // Adds the special tokens around `ids` (only called when add_special is requested).
  void apply(std::vector<int32_t>& ids) const;
};

Result<std::optional<PostProcessor>> parse_post_processor(const nlohmann::json& j,
                                                          const std::string& source);

}  // namespace tq::text
