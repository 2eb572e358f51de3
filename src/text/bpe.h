// The BPE model of tokenizer.json: vocabulary, ranked merges, byte fallback, unk handling.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.h"

namespace tq::text {

// Hash for heterogeneous lookup of std::string keys by string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
// Word -> ids, kept for the duration of one encode call (pre-tokenized words repeat a lot).
using BpeCache = std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // `model` is the "model" object of tokenizer.json (type BPE).
  static Result<Bpe> from_json(const nlohmann::json& model, const std::string& source);

  // Appends the ids of one pre-tokenized word to `out`; `cache` may be null.
  void tokenize(std::string_view word, std::vector<int32_t>& out, BpeCache* cache) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when the id has no token
  int64_t id_bound() const { return static_cast<int64_t>(id_to_token_.size()); }
  int64_t entries() const { return static_cast<int64_t>(vocab_.size()); }

 private:
  struct MergeInfo {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Open-addressing table (pair key -> merge); BPE spends most of its time in these lookups.
  struct MergeTable {
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^24, so no pair has this key
    std::vector<uint64_t> keys;
    std::vector<MergeInfo> values;
    uint64_t mask = 0;
    void build(const std::unordered_map<uint64_t, MergeInfo>& m);
    const MergeInfo* find(uint64_t key) const;
  };
  const MergeInfo* find_merge(int32_t a, int32_t b) const { return table_.find(pair_key(a, b)); }
  // Initial symbols of a word: one per character, then byte fallback / unk handling.
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge_all(std::vector<int32_t>& ids) const;

  VocabMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  MergeTable table_;
  std::optional<std::string> unk_token_;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // id of "<0xXX>" or -1
};

}  // namespace tq::text
