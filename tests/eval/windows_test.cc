#include "eval/windows.h"

#include <gtest/gtest.h>

#include <numeric>

namespace tq::eval {
namespace {

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 100);
  return v;
}

constexpr int32_t kBos = 7;
const BosInfo kAddsBos{kBos, true};
const BosInfo kNoBos{std::nullopt, false};

TEST(Windows, MlxCutsCompleteNonOverlappingWindows) {
  auto w = make_windows(iota_tokens(10), {Protocol::kMlx, 4, 0, BosMode::kAuto}, kAddsBos, "t");
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_FALSE(w->bos);  // auto is "no" for mlx, even when the tokenizer adds BOS
  EXPECT_EQ(w->count, 2);
  EXPECT_EQ(w->first_target, 1);
  EXPECT_EQ(w->tokens, (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(w->tokens_scored(), 6);
  EXPECT_EQ(protocol_string(*w, "abc"),
            "protocol=mlx text_sha256=abc L=4 windows=2 tokens_scored=6 bos=no");
}

TEST(Windows, MlxWithBosHoldsLMinusOneTextTokens) {
  auto w = make_windows(iota_tokens(10), {Protocol::kMlx, 4, 0, BosMode::kYes}, kNoBos, "t");
  EXPECT_FALSE(w.ok());  // no BOS known
  w = make_windows(iota_tokens(10), {Protocol::kMlx, 4, 0, BosMode::kYes}, {kBos, false}, "t");
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_TRUE(w->bos);
  EXPECT_EQ(w->count, 3);
  EXPECT_EQ(w->tokens,
            (std::vector<int32_t>{7, 100, 101, 102, 7, 103, 104, 105, 7, 106, 107, 108}));
  EXPECT_EQ(w->tokens_scored(), 9);
}

TEST(Windows, LlamaCppScoresTheSecondHalfWithBosFirst) {
  auto w =
      make_windows(iota_tokens(11), {Protocol::kLlamaCpp, 6, 0, BosMode::kAuto}, kAddsBos, "t");
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_TRUE(w->bos);            // auto: the tokenizer adds BOS, as llama.cpp does
  EXPECT_EQ(w->first_target, 4);  // n_ctx/2 + 1: logits of positions 3..4 score tokens 4..5
  EXPECT_EQ(w->scored_per_window(), 2);
  EXPECT_EQ(w->count, 2);  // stream BOS + 11 tokens = 12 = 2 chunks
  // Chunk 2 starts at stream position 6 (text token 105), overwritten by BOS.
  EXPECT_EQ(w->tokens,
            (std::vector<int32_t>{7, 100, 101, 102, 103, 104, 7, 106, 107, 108, 109, 110}));
  auto nb = make_windows(iota_tokens(11), {Protocol::kLlamaCpp, 6, 0, BosMode::kAuto}, kNoBos, "t");
  ASSERT_TRUE(nb.ok());
  EXPECT_FALSE(nb->bos);
  EXPECT_EQ(nb->count, 1);
  EXPECT_EQ(nb->tokens, (std::vector<int32_t>{100, 101, 102, 103, 104, 105}));
}

TEST(Windows, WindowsFlagTakesTheFirstN) {
  auto w = make_windows(iota_tokens(100), {Protocol::kMlx, 8, 3, BosMode::kNo}, kNoBos, "t");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->count, 3);
  EXPECT_EQ(w->window(2)[0], 116);
}

TEST(Windows, ClearErrors) {
  auto empty = make_windows({}, {}, kNoBos, "wiki.raw");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("wiki.raw: text is empty"), std::string::npos);
  auto short_text = make_windows(iota_tokens(511), {}, kNoBos, "wiki.raw");
  ASSERT_FALSE(short_text.ok());
  EXPECT_NE(short_text.error().message.find("fewer than one window of 512"), std::string::npos)
      << short_text.error().message;
  auto too_many = make_windows(iota_tokens(1030), {Protocol::kMlx, 512, 3}, kNoBos, "wiki.raw");
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message.find("only 2 complete windows"), std::string::npos);
  EXPECT_FALSE(make_windows(iota_tokens(10), {Protocol::kMlx, 1}, kNoBos, "t").ok());
  EXPECT_FALSE(make_windows(iota_tokens(10), {Protocol::kLlamaCpp, 2}, kNoBos, "t").ok());
  EXPECT_FALSE(parse_protocol("hf").ok());
  EXPECT_FALSE(parse_bos_mode("maybe").ok());
}

}  // namespace
}  // namespace tq::eval
