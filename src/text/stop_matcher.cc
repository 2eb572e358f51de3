#include "text/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace tq {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::add(std::string_view piece) {
  if (stopped_) return {};
  held_.append(piece);
  if (stops_.empty()) return std::exchange(held_, {});
  // The earliest full match wins (ties: the longer stop, as it covers the shorter one's start).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < best || (at == best && at != std::string::npos && s.size() > matched_.size())) {
      best = at;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop (shorter than that stop).
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t most = std::min(s.size() - 1, held_.size());
    for (size_t k = most; k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() { return std::exchange(held_, {}); }

}  // namespace tq
