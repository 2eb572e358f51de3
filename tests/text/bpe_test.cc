// BPE model behaviour on tiny handmade tokenizer.json files: merge order, byte fallback, unk,
// ignore_merges, subword prefix/suffix, both merge spellings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace tq {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// A tokenizer.json with a bare BPE model (no normalizer, no pre-tokenizer).
std::string bpe_json(const json& vocab, const json& merges, json extra = json::object()) {
  json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  for (auto& [k, v] : extra.items()) model[k] = v;
  return json{{"version", "1.0"}, {"model", model}}.dump();
}

Tokenizer load(const std::string& text) {
  auto t = Tokenizer::from_json(text, "test.json");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return std::move(t).value();
}

const json kAbcVocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}};

TEST(Bpe, LowestRankMergesFirst) {
  // (b c) outranks (a b): abc = a + bc
  Tokenizer t1 = load(bpe_json(kAbcVocab, {"b c", "a b", "a bc"}));
  EXPECT_EQ(t1.encode("abc"), (Ids{5}));
  // (a b) first, and no (ab c) merge: stays ab + c
  Tokenizer t2 = load(bpe_json(kAbcVocab, {"a b", "b c", "a bc"}));
  EXPECT_EQ(t2.encode("abc"), (Ids{3, 2}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  Tokenizer t = load(bpe_json(kAbcVocab, json::array({"a a"})));
  EXPECT_EQ(t.encode("aaa"), (Ids{6, 0}));
  EXPECT_EQ(t.encode("aaaa"), (Ids{6, 6}));
  EXPECT_EQ(t.encode("aaaaa"), (Ids{6, 6, 0}));
}

TEST(Bpe, MergesAsPairsEqualMergesAsStrings) {
  Tokenizer s = load(bpe_json(kAbcVocab, {"b c", "a bc", "a a"}));
  Tokenizer p = load(bpe_json(kAbcVocab, json::array({{"b", "c"}, {"a", "bc"}, {"a", "a"}})));
  for (const char* text : {"abc", "aabcbca", "cba", "aaaabc"}) {
    EXPECT_EQ(s.encode(text), p.encode(text)) << text;
  }
}

TEST(Bpe, LongWordMatchesShortWords) {
  // The heap-based merge on one long word must equal merging its independent pieces.
  Tokenizer t = load(bpe_json(kAbcVocab, {"b c", "a bc", "a a", "a b"}));
  std::string text;
  Ids expect;
  for (int i = 0; i < 20000; ++i) {
    text += "abc";
    expect.push_back(5);
  }
  EXPECT_EQ(t.encode(text), expect);
}

TEST(Bpe, IgnoreMergesTakesWholeWordFromVocab) {
  json merges = {"a b", "b c"};  // "abc" is in the vocab but no merge reaches it
  EXPECT_EQ(load(bpe_json(kAbcVocab, merges)).encode("abc"), (Ids{3, 2}));
  EXPECT_EQ(load(bpe_json(kAbcVocab, merges, {{"ignore_merges", true}})).encode("abc"), (Ids{5}));
}

TEST(Bpe, ByteFallbackSpellsUnknownCharactersAsBytes) {
  json vocab = {{"<unk>", 0}, {"<0xC3>", 1}, {"<0xA9>", 2}, {"a", 3}, {"<0xE4>", 4}};
  Tokenizer t = load(bpe_json(
      vocab, json::array(), {{"byte_fallback", true}, {"unk_token", "<unk>"}, {"fuse_unk", true}}));
  EXPECT_EQ(t.encode("a\xC3\xA9"
                     "a"),
            (Ids{3, 1, 2, 3}));  // é = C3 A9
  // 中 = E4 B8 AD: <0xB8> is missing, so the whole character becomes <unk>
  EXPECT_EQ(t.encode("a\xE4\xB8\xAD"), (Ids{3, 0}));
}

TEST(Bpe, UnknownCharactersFuseOrNot) {
  json vocab = {{"<unk>", 0}, {"a", 1}};
  json fused = {{"unk_token", "<unk>"}, {"fuse_unk", true}};
  json unfused = {{"unk_token", "<unk>"}, {"fuse_unk", false}};
  EXPECT_EQ(load(bpe_json(vocab, json::array(), fused)).encode("xyzaxy"), (Ids{0, 1, 0}));
  EXPECT_EQ(load(bpe_json(vocab, json::array(), unfused)).encode("xyzaxy"),
            (Ids{0, 0, 0, 1, 0, 0}));
  // without an unk token, unknown characters produce nothing (as tokenizers does)
  EXPECT_EQ(load(bpe_json(vocab, json::array())).encode("xyzaxy"), (Ids{1}));
}

TEST(Bpe, ContinuingSubwordPrefixAndEndOfWordSuffix) {
  json vocab = {{"a", 0}, {"##b", 1}, {"ab", 2}, {"##c", 3}};
  Tokenizer t =
      load(bpe_json(vocab, json::array({"a ##b"}), {{"continuing_subword_prefix", "##"}}));
  EXPECT_EQ(t.encode("ab"), (Ids{2}));
  EXPECT_EQ(t.encode("abc"), (Ids{2, 3}));
  json vocab2 = {{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}};
  Tokenizer s = load(bpe_json(vocab2, json::array({"a b</w>"}), {{"end_of_word_suffix", "</w>"}}));
  EXPECT_EQ(s.encode("ab"), (Ids{2}));
}

TEST(Bpe, VersionLinesInMergesTakeNoRank) {
  Tokenizer t = load(bpe_json(kAbcVocab, {"#version: 0.2", "b c", "a bc"}));
  EXPECT_EQ(t.encode("abc"), (Ids{5}));
}

TEST(Bpe, DecodeWithoutDecoderJoinsWithSpaces) {
  Tokenizer t = load(bpe_json(kAbcVocab, json::array({"a b"})));
  EXPECT_EQ(t.decode(Ids{3, 2, 999, -1}), "ab c");  // unknown ids are skipped
  EXPECT_EQ(t.vocab_size(), 7);
  EXPECT_EQ(t.token_to_id("bc"), 4);
  EXPECT_EQ(t.id_to_token(5), "abc");
  EXPECT_EQ(t.id_to_token(12345), "");
}

}  // namespace
}  // namespace tq
