// StopMatcher: stops found inside a piece and across pieces, held-back text released when it
// turns out not to be a stop, the earliest stop winning, and nothing after a stop.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/stop_matcher.h"

namespace tq {
namespace {

// Feeds `pieces`; returns the emitted text and whether a stop was found.
std::pair<std::string, bool> run(std::vector<std::string> stops,
                                 const std::vector<std::string>& pieces) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const auto& p : pieces) out += m.add(p);
  if (!m.stopped()) out += m.flush();
  return {out, m.stopped()};
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.add("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopInsideOnePiece) {
  auto [out, stopped] = run({"END"}, {"hello END world"});
  EXPECT_EQ(out, "hello ");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcher, StopAcrossPiecesIsHeldUntilDecided) {
  StopMatcher m({"</s>"});
  EXPECT_EQ(m.add("a<"), "a");  // "<" may start the stop
  EXPECT_EQ(m.add("/"), "");
  EXPECT_EQ(m.add("s"), "");
  EXPECT_EQ(m.add(">tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "</s>");
  EXPECT_EQ(m.add("more"), "");
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.add("line\n"), "line");
  EXPECT_EQ(m.add("next"), "\nnext");
  EXPECT_EQ(m.add("\n"), "");
  EXPECT_EQ(m.flush(), "\n");  // the end of generation releases what was held
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestStopWins) {
  EXPECT_EQ(run({"world", "lo"}, {"hello world"}).first, "hel");
  EXPECT_EQ(run({"ab", "abc"}, {"xabcd"}).first, "x");
}

TEST(StopMatcher, OverlappingPrefixesHoldTheLongestCandidate) {
  // "aab" must be found even though "a" then "aa" looked like starts of it.
  EXPECT_EQ(run({"aab"}, {"a", "a", "a", "b", "c"}), std::make_pair(std::string("a"), true));
  EXPECT_EQ(run({"aab"}, {"a", "a", "a", "c"}), std::make_pair(std::string("aaac"), false));
}

TEST(StopMatcher, MultibyteStopsNeverSplitACharacterInTheOutput) {
  const std::string stop = "日本";                                     // 6 bytes
  std::vector<std::string> pieces = {"x日", "\xE6", "\x9C\xAC", "y"};  // 本 split in two pieces
  auto [out, stopped] = run({stop}, pieces);
  EXPECT_EQ(out, "x");
  EXPECT_TRUE(stopped);
  auto [out2, stopped2] = run({stop}, {"x日", "月"});
  EXPECT_EQ(out2, "x日月");
  EXPECT_FALSE(stopped2);
}

TEST(StopMatcher, EveryPrefixSplitFindsTheStop) {
  const std::string text = "The answer is 42.\nQ: next";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    for (size_t cut2 = cut; cut2 <= text.size(); ++cut2) {
      auto [out, stopped] =
          run({"\nQ:"}, {text.substr(0, cut), text.substr(cut, cut2 - cut), text.substr(cut2)});
      EXPECT_EQ(out, "The answer is 42.") << cut << "," << cut2;
      EXPECT_TRUE(stopped);
    }
  }
}

}  // namespace
}  // namespace tq
