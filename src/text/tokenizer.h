// Tokenizers from Hugging Face tokenizer.json: byte-level BPE (GPT-2, Llama-3, Qwen2/3,
// SmolLM2) and SentencePiece-style BPE with byte fallback (Llama-2, Mistral).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tq {

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // `source` names the file in error messages.
  static Result<Tokenizer> from_json(std::string_view json_text, const std::string& source);
  static Result<Tokenizer> from_file(const std::string& tokenizer_json_path);

  // add_special applies the post-processor (e.g. BOS for Llama-2), as tokenizers'
  // encode(text, add_special_tokens=True). Invalid UTF-8 in `text` is read as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Ids without a token are skipped, as tokenizers does; the result is valid UTF-8.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int64_t vocab_size() const;  // largest id + 1, added tokens included
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // The top-level decoder is ByteLevel (GPT-2 style): mlx-lm then streams with its BPE
  // detokenizer, which drops the leading space of the generated text.
  bool byte_level_decoder() const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq
