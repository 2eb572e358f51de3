// tokenizer.json "added_tokens": matched in the text before the model sees it, leftmost-longest,
// honouring single_word / lstrip / rstrip; `normalized` ones match the normalized text.
// Ids follow the tokenizers crate, not the file: a token in the model vocabulary keeps its id,
// others are numbered on from the vocabulary size (the same ids for every consistent file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.h"
#include "text/bpe.h"

namespace tq::text {

struct Normalizer;

struct AddedToken {
  std::string content;
  std::string decoded;  // what decode emits: the normalized content for `normalized` tokens
  int32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// A byte range of the input; `id` >= 0 when it is an added token.
struct TextPiece {
  size_t start, end;
  int32_t id;
};

class AddedVocab {
 public:
  static Result<AddedVocab> from_json(const nlohmann::json& list, const Bpe& model,
                                      const Normalizer* normalizer, const std::string& source);

  // Cuts `text` on the added tokens of one set (normalized or not); pieces cover the text.
  void split(std::string_view text, bool normalized_set, std::vector<TextPiece>& out) const;

  // The token's string for decoding; nullptr when `id` is not an added token.
  const std::string* content(int32_t id) const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  int32_t max_id() const { return max_id_; }
  bool empty() const { return by_id_.empty(); }

 private:
  // A byte trie over one set's patterns; node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
      int32_t token = -1;                             // token id
    };
    std::vector<Node> nodes{1};
    bool first_byte[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at s[i]: its token id and length, or id -1.
    std::pair<int32_t, size_t> longest_at(std::string_view s, size_t i) const;
  };

  std::unordered_map<int32_t, AddedToken> by_id_;  // the latest token given each id
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> by_content_;
  std::unordered_set<std::string> special_;  // contents of special tokens
  Trie raw_, normalized_;
  int32_t max_id_ = -1;
};

}  // namespace tq::text
