// Incremental detokenization for streaming generation: each added token returns the text that
// became final, never a broken UTF-8 sequence. Pending tokens are re-decoded together with a
// few tokens of context, so decoders that treat the start of a sequence specially
// (SentencePiece's leading-space strip) and characters split across byte tokens both come
// out as the full decode of all tokens would print them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace tq {

class StreamDecoder {
 public:
  // trim_leading_space drops one space at the start of the text, as mlx-lm's streaming
  // detokenizers print generations (the model's first token usually starts with one).
  explicit StreamDecoder(const Tokenizer& tok, bool trim_leading_space = false,
                         bool skip_special = false)
      : tok_(tok), trim_(trim_leading_space), skip_special_(skip_special) {}

  // The new final text after `id` (empty while a character is incomplete).
  std::string add(int32_t id);
  // Everything still held back (an incomplete character comes out as U+FFFD).
  std::string finish();

  const std::vector<int32_t>& tokens() const { return ids_; }

 private:
  static constexpr size_t kContext = 4;  // tokens decoded before the pending ones

  std::string decode_from(size_t start, size_t end) const;
  std::string emit(bool final);

  const Tokenizer& tok_;
  bool trim_;
  bool skip_special_;
  bool emitted_ = false;  // some text came out already
  std::vector<int32_t> ids_;
  size_t pending_ = 0;  // first token whose text is not fully emitted
};

}  // namespace tq
