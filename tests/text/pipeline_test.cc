// The pipeline around the model on tiny tokenizer.json files: added tokens and their flags,
// normalizers, pre-tokenizers, post-processors and decoders.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace tq {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// Vocabulary of single characters a-z, space and ▁, plus the given extra tokens.
json char_vocab(std::initializer_list<const char*> extra = {}) {
  json v = json::object();
  int id = 0;
  for (char c = 'a'; c <= 'z'; ++c) v[std::string(1, c)] = id++;
  v[" "] = id++;
  v["\xE2\x96\x81"] = id++;  // ▁
  for (const char* e : extra) v[e] = id++;
  return v;
}

json added(int id, const char* content, bool special, json flags = json::object()) {
  json t = {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
            {"rstrip", false}, {"normalized", false}, {"special", special}};
  for (auto& [k, v] : flags.items()) t[k] = v;
  return t;
}

Tokenizer load(const json& j) {
  auto t = Tokenizer::from_json(j.dump(), "test.json");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return std::move(t).value();
}

json base(json vocab, json merges = json::array()) {
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(AddedTokens, SplitBeforeTheModelLeftmostLongest) {
  json j = base(char_vocab());
  j["added_tokens"] =
      json::array({added(100, "<s>", true), added(101, "<s><s>", true), added(102, "ab", false)});
  Tokenizer t = load(j);
  // As in tokenizers, the ids in the file (100..102) are not used: tokens outside the model
  // vocabulary are numbered on from its size (28), in file order.
  EXPECT_EQ(t.token_to_id("<s>"), 28);
  EXPECT_EQ(t.token_to_id("<s><s>"), 29);
  EXPECT_EQ(t.token_to_id("ab"), 30);
  // "<s><s>" wins over "<s>" (longest at the leftmost start); "ab" is one token
  EXPECT_EQ(t.encode("x<s><s>abc<s>"), (Ids{23, 29, 30, 2, 28}));
  EXPECT_TRUE(t.is_special(28));
  EXPECT_FALSE(t.is_special(30));
  EXPECT_EQ(t.vocab_size(), 31);
  EXPECT_EQ(t.decode(Ids{23, 28, 30}), "x <s> ab");  // no decoder: joined with spaces
  EXPECT_EQ(t.decode(Ids{23, 28, 30}, /*skip_special=*/true), "x ab");
}

TEST(AddedTokens, LstripRstripTakeTheSurroundingSpaces) {
  json j = base(char_vocab());
  j["added_tokens"] = json::array({added(100, "<m>", true, {{"lstrip", true}, {"rstrip", true}})});
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a  <m>  b"), (Ids{0, 28, 1}));
  json k = base(char_vocab());
  k["added_tokens"] = json::array({added(100, "<m>", true)});
  EXPECT_EQ(load(k).encode("a <m> b"), (Ids{0, 26, 28, 26, 1}));
}

TEST(AddedTokens, SingleWordOnlyMatchesWholeWords) {
  json j = base(char_vocab());
  j["added_tokens"] = json::array({added(100, "hi", false, {{"single_word", true}})});
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("hi there"), (Ids{28, 26, 19, 7, 4, 17, 4}));
  EXPECT_EQ(t.encode("chip"), (Ids{2, 7, 8, 15}));  // inside a word: not the added token
}

TEST(AddedTokens, NormalizedTokensMatchTheNormalizedText) {
  json j = base(char_vocab());
  j["normalizer"] = {{"type", "Lowercase"}};
  j["added_tokens"] = json::array({added(100, "Hello", false, {{"normalized", true}}),
                                   added(101, "BYE", false, {{"normalized", false}})});
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("HELLO hello"), (Ids{28, 26, 28}));
  EXPECT_EQ(t.encode("BYE bye"), (Ids{29, 26, 1, 24, 4}));
  EXPECT_EQ(t.decode(Ids{28}), "hello");  // decodes as its normalized form, as tokenizers
}

// Llama-2: Prepend + Replace normalizer, byte fallback, BOS template, and the decoder chain
// Replace / ByteFallback / Fuse / Strip that undoes them.
json llama2_like() {
  json j = base(char_vocab({"<unk>", "<s>", "<0xE4>", "<0xB8>", "<0xAD>", "\xE2\x96\x81h"}),
                json::array({"\xE2\x96\x81 h"}));
  j["model"]["byte_fallback"] = true;
  j["model"]["unk_token"] = "<unk>";
  j["added_tokens"] = json::array({added(29, "<s>", true)});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", json::array({29})}, {"tokens", json::array({"<s>"})}}}}}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return j;
}

TEST(Pipeline, SentencePieceStyleEncodeAndDecode) {
  Tokenizer t = load(llama2_like());
  // "hi 中": ▁h i ▁ <0xE4><0xB8><0xAD>
  Ids ids = t.encode("hi \xE4\xB8\xAD");
  EXPECT_EQ(ids, (Ids{33, 8, 27, 30, 31, 32}));
  EXPECT_EQ(t.encode("hi \xE4\xB8\xAD", /*add_special=*/true), (Ids{29, 33, 8, 27, 30, 31, 32}));
  EXPECT_EQ(t.decode(ids), "hi \xE4\xB8\xAD");  // Strip removes the space Prepend added
  EXPECT_EQ(t.decode(Ids{30, 31}), "\xEF\xBF\xBD\xEF\xBF\xBD");  // incomplete: one U+FFFD a byte
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.encode("", true), Ids{29});
}

TEST(Pipeline, ByteLevelRoundTripsArbitraryBytes) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[text::byte_to_unicode(static_cast<unsigned char>(b))] = b;
  json j = base(vocab);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  Tokenizer t = load(j);
  std::string text = "It's 2024!\r\n  \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80";
  Ids ids = t.encode(text);
  EXPECT_EQ(ids.size(), text.size());  // no merges: one token per byte
  EXPECT_EQ(t.decode(ids), text);
  // invalid UTF-8 input is read as U+FFFD, and an invalid byte sequence decodes to U+FFFD
  EXPECT_EQ(t.decode(t.encode("a\xFF")), "a\xEF\xBF\xBD");
  EXPECT_EQ(t.decode(Ids{0xE4, 'a'}),
            "\xEF\xBF\xBD"
            "a");
}

TEST(Pipeline, SplitDigitsAndMetaspacePreTokenizers) {
  json j = base(char_vocab({"1", "2", "12",
                            "\xE2\x96\x81"
                            "a"}),
                {"1 2", "\xE2\x96\x81 a"});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Digits"}, {"individual_digits", true}},
                          {{"type", "Metaspace"},
                           {"replacement", "\xE2\x96\x81"},
                           {"prepend_scheme", "first"},
                           {"split", true}}}}};
  Tokenizer t = load(j);
  // digits are isolated before BPE, so "12" never merges; only the first split gets a ▁
  // (values checked against tokenizers 0.23.3)
  EXPECT_EQ(t.encode("12 a"), (Ids{27, 28, 29, 31}));
  EXPECT_EQ(t.encode("x12 a"), (Ids{27, 23, 28, 29, 31}));
}

}  // namespace
}  // namespace tq
