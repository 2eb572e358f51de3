#include "eval/windows.h"

#include <algorithm>

namespace tq::eval {

std::string_view protocol_name(Protocol p) { return p == Protocol::kMlx ? "mlx" : "llamacpp"; }

Result<Protocol> parse_protocol(std::string_view s) {
  if (s == "mlx") return Protocol::kMlx;
  if (s == "llamacpp") return Protocol::kLlamaCpp;
  return err("unknown protocol '{}' (expected mlx or llamacpp)", s);
}

Result<BosMode> parse_bos_mode(std::string_view s) {
  if (s == "auto") return BosMode::kAuto;
  if (s == "yes") return BosMode::kYes;
  if (s == "no") return BosMode::kNo;
  return err("unknown --bos value '{}' (expected auto, yes or no)", s);
}

Result<Windows> make_windows(std::span<const int32_t> text_tokens, const WindowSpec& spec,
                             const BosInfo& bos, const std::string& source) {
  const std::string_view pname = protocol_name(spec.protocol);
  Windows w;
  w.protocol = spec.protocol;
  w.seq_len = spec.seq_len;
  w.bos = spec.bos == BosMode::kYes || (spec.bos == BosMode::kAuto &&
                                        spec.protocol == Protocol::kLlamaCpp && bos.tokenizer_adds);
  if (w.bos && !bos.id) return err("{}: --bos yes, but the model has no BOS token", source);
  const int64_t L = spec.seq_len;
  w.first_target = spec.protocol == Protocol::kMlx ? 1 : L / 2 + 1;
  if (L < 2 || L - w.first_target < 1)
    return err("--seq-len {} is too short for the {} protocol (at least {})", L, pname,
               spec.protocol == Protocol::kMlx ? 2 : 3);
  if (text_tokens.empty()) return err("{}: text is empty (no tokens)", source);

  // Text tokens per window, and the stream the windows are cut from.
  const bool mlx = spec.protocol == Protocol::kMlx;
  const int64_t text_per_window = mlx && w.bos ? L - 1 : L;
  std::vector<int32_t> stream;
  if (!mlx && w.bos) stream.push_back(*bos.id);
  stream.insert(stream.end(), text_tokens.begin(), text_tokens.end());
  const int64_t available = int64_t(stream.size()) / text_per_window;
  if (available == 0)
    return err("{}: text has {} tokens, fewer than one window of {} ({} protocol)", source,
               text_tokens.size(), text_per_window, pname);
  if (spec.windows < 0) return err("--windows must be positive, got {}", spec.windows);
  if (spec.windows > available)
    return err("{}: --windows {} asked, but the text has only {} complete windows of {} tokens",
               source, spec.windows, available, text_per_window);
  w.count = spec.windows > 0 ? spec.windows : available;

  w.tokens.reserve(size_t(w.count * L));
  for (int64_t i = 0; i < w.count; ++i) {
    auto begin = stream.begin() + i * text_per_window;
    if (mlx && w.bos) w.tokens.push_back(*bos.id);
    size_t first = w.tokens.size();
    w.tokens.insert(w.tokens.end(), begin, begin + text_per_window);
    if (!mlx && w.bos) w.tokens[first] = *bos.id;  // llama.cpp overwrites the chunk's first token
  }
  return w;
}

std::string protocol_string(const Windows& w, const std::string& text_sha256) {
  return fmt::format("protocol={} text_sha256={} L={} windows={} tokens_scored={} bos={}",
                     protocol_name(w.protocol), text_sha256, w.seq_len, w.count, w.tokens_scored(),
                     w.bos ? "yes" : "no");
}

}  // namespace tq::eval
