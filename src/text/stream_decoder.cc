#include "text/stream_decoder.h"

#include <algorithm>
#include <span>

namespace tq {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0;
}

}  // namespace

std::string StreamDecoder::decode_from(size_t start, size_t end) const {
  return tok_.decode(std::span<const int32_t>(ids_.data() + start, end - start), skip_special_);
}

std::string StreamDecoder::emit(bool final) {
  if (pending_ >= ids_.size()) return {};
  const size_t start = pending_ > kContext ? pending_ - kContext : 0;
  std::string before = decode_from(start, pending_);
  std::string now = decode_from(start, ids_.size());
  // A trailing U+FFFD is a character whose bytes have not all arrived yet.
  if (!final && ends_with_replacement(now)) return {};
  size_t common = 0;
  while (common < before.size() && common < now.size() && before[common] == now[common]) ++common;
  // `before` ends at a character boundary emitted earlier; if the decoder rewrote it (it
  // should not), print from where the two agree, never half a character.
  while (common > 0 && common < now.size() &&
         (static_cast<unsigned char>(now[common]) & 0xC0) == 0x80)
    --common;
  pending_ = ids_.size();
  std::string out = now.substr(common);
  if (trim_ && !emitted_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  emitted_ = emitted_ || !out.empty();
  return out;
}

std::string StreamDecoder::add(int32_t id) {
  ids_.push_back(id);
  return emit(false);
}

std::string StreamDecoder::finish() { return emit(true); }

}  // namespace tq
