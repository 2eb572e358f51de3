// tokenizer.json "decoder": ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.h"
#include "text/regex.h"

namespace tq::text {

struct Decoder {
  enum class Kind { kSequence, kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind = Kind::kSequence;
  std::string text;     // Replace: literal pattern; Strip: the character; Metaspace: replacement
  std::string content;  // Replace: replacement
  std::optional<Regex> regex;              // Replace with a regex pattern
  size_t strip_start = 0, strip_stop = 0;  // Strip: how many to remove at each end
  bool prepend = true;                     // Metaspace: prepend_scheme is not "never"
  std::vector<Decoder> children;

  // Transforms the token strings in place (tokenizers' decode_chain).
  void apply(std::vector<std::string>& tokens) const;
};

Result<std::optional<Decoder>> parse_decoder(const nlohmann::json& j, const std::string& source);

}  // namespace tq::text
