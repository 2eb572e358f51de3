// How a text becomes scored token windows: the perplexity protocols of mlx-lm and llama.cpp.
//
// mlx (mlx_lm.perplexity, FORMATS.md §8.1): the text tokenized whole without special tokens, cut
//   into non-overlapping windows of L tokens; each window is independent and scores its L-1
//   next-token targets (positions 1..L-1). With BOS on, each window is BOS + L-1 text tokens.
// llamacpp (llama-perplexity): the token stream (BOS + text when BOS is on) cut into chunks of
//   n_ctx = L tokens, the first token of every chunk set to BOS when BOS is on; only the second
//   half is scored: targets n_ctx/2+1 .. n_ctx-1, i.e. n_ctx-1-n_ctx/2 per chunk.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tq::eval {

enum class Protocol : uint8_t { kMlx, kLlamaCpp };
enum class BosMode : uint8_t {
  kAuto,
  kYes,
  kNo
};  // auto: no for mlx, the tokenizer's for llamacpp

std::string_view protocol_name(Protocol p);  // "mlx", "llamacpp"
Result<Protocol> parse_protocol(std::string_view s);
Result<BosMode> parse_bos_mode(std::string_view s);  // "auto", "yes", "no"

struct WindowSpec {
  Protocol protocol = Protocol::kMlx;
  int64_t seq_len = 512;
  int64_t windows = 0;  // 0: every complete window of the text
  BosMode bos = BosMode::kAuto;
};

// What the model's tokenizer says about BOS.
struct BosInfo {
  std::optional<int32_t> id;    // the BOS id, if the model has one
  bool tokenizer_adds = false;  // encode(add_special=true) prepends it
};

struct Windows {
  Protocol protocol = Protocol::kMlx;
  int64_t seq_len = 0;
  int64_t count = 0;
  bool bos = false;
  int64_t first_target = 1;     // targets first_target..seq_len-1 of each window are scored
  std::vector<int32_t> tokens;  // [count, seq_len]

  std::span<const int32_t> window(int64_t w) const {
    return {tokens.data() + w * seq_len, size_t(seq_len)};
  }
  int64_t scored_per_window() const { return seq_len - first_target; }
  int64_t tokens_scored() const { return count * scored_per_window(); }
};

// `text_tokens`: the whole text tokenized without special tokens. `source` (the text file) names
// the text in errors: empty text, too few tokens for one window, more windows asked than exist.
Result<Windows> make_windows(std::span<const int32_t> text_tokens, const WindowSpec& spec,
                             const BosInfo& bos, const std::string& source);

// "protocol=mlx text_sha256=<hex> L=512 windows=64 tokens_scored=32704 bos=no"
std::string protocol_string(const Windows& w, const std::string& text_sha256);

}  // namespace tq::eval
