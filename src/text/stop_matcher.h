// Stop strings matched on generated text as it streams: text that could still be the start of
// a stop string is held back until the next piece decides it, so a stop that straddles token
// boundaries is found and no byte of it is ever emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tq {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // The text now safe to emit after `piece` (everything before a stop, once one is found).
  std::string add(std::string_view piece);
  // At the end of generation: the held-back text (none after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string found

 private:
  std::vector<std::string> stops_;  // empty strings dropped
  std::string held_;                // a suffix that is a prefix of some stop
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace tq
