// Bad tokenizer.json files give one-line errors naming the file and the component; never a crash.
#include <gtest/gtest.h>

#include <chrono>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace tq {
namespace {

using nlohmann::json;

json minimal() {
  return {{"model",
           {{"type", "BPE"},
            {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}},
            {"merges", json::array({"a b"})}}}};
}

// Loads `j` and returns the error message ("" when it loads).
std::string load_error(const std::string& text) {
  auto t = Tokenizer::from_json(text, "bad/tokenizer.json");
  return t.ok() ? "" : t.error().message;
}
std::string load_error(const json& j) { return load_error(j.dump()); }

json split_regex(const char* pattern) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", pattern}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void expect_error(const json& j, const std::string& needle) {
  std::string e = load_error(j);
  EXPECT_NE(e.find("bad/tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find(needle), std::string::npos) << "error '" << e << "' lacks '" << needle << "'";
}

TEST(TokenizerErrors, MinimalLoads) { EXPECT_EQ(load_error(minimal()), ""); }

TEST(TokenizerErrors, MalformedJson) {
  for (const char* text : {"", "{", "{\"model\": ", "[1, 2", "nul", "\"\\uD800\""}) {
    std::string e = load_error(std::string(text));
    EXPECT_NE(e.find("bad/tokenizer.json"), std::string::npos) << text << " -> " << e;
  }
  EXPECT_NE(load_error(std::string("[]")).find("must be a JSON object"), std::string::npos);
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  json j = minimal();
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model type 'WordPiece' is not supported");
  j = minimal();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(j, "normalizer type 'BertNormalizer' is not supported");
  j = minimal();
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Precompiled"}}})}};
  expect_error(j, "normalizer type 'Precompiled'");
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "pre_tokenizer type 'Whitespace' is not supported");
  j = minimal();
  j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  expect_error(j, "decoder type 'WordPiece' is not supported");
  j = minimal();
  j["post_processor"] = {{"type", "Mystery"}};
  expect_error(j, "post_processor type 'Mystery' is not supported");
}

TEST(TokenizerErrors, BadModelContents) {
  json j = minimal();
  j["model"]["merges"] = json::array({"a c"});
  expect_error(j, "not in the vocabulary");
  j = minimal();
  j["model"]["merges"] = json::array({"a b c"});
  expect_error(j, "merge 0");
  j = minimal();
  j["model"]["vocab"]["x"] = -3;
  expect_error(j, "out of range");
  j = minimal();
  j["model"]["vocab"]["x"] = "7";
  expect_error(j, "not an integer");
  j = minimal();
  j["model"]["dropout"] = 0.1;
  expect_error(j, "dropout");
  j = minimal();
  j["model"]["unk_token"] = "<unk>";
  expect_error(j, "unk_token '<unk>' is not in the vocabulary");
  j = minimal();
  j["model"]["byte_fallback"] = "yes";
  expect_error(j, "'byte_fallback' must be true or false");
  j = minimal();
  j.erase("model");
  expect_error(j, "missing 'model'");
}

TEST(TokenizerErrors, BadComponentContents) {
  json j = minimal();
  j["pre_tokenizer"] = split_regex("(unclosed");
  expect_error(j, "does not compile");
  j["pre_tokenizer"]["pattern"] = {{"Regex", "a"}};
  j["pre_tokenizer"]["behavior"] = "Sideways";
  expect_error(j, "unknown behavior 'Sideways'");
  j = minimal();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}})},
      {"special_tokens", json::object()}};
  expect_error(j, "special token '<s>' is missing");
  j = minimal();
  j["decoder"] = {{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}};
  expect_error(j, "exactly one character");
  j = minimal();
  j["added_tokens"] = json::array({{{"id", -1}, {"content", "<s>"}}});
  expect_error(j, "'id' out of range");
}

// A split or replace regex that backtracks exponentially would stall every encode; it is refused
// when the tokenizer loads, quickly, with the pattern and the subject that exceeded the limit.
TEST(TokenizerErrors, CostlyRegexIsRejected) {
  json j = minimal();
  j["pre_tokenizer"] = split_regex("(\\w+\\s?)+$");
  auto t0 = std::chrono::steady_clock::now();
  expect_error(j, "regex '(\\w+\\s?)+$' is too costly to match: match limit exceeded on a run of");
  EXPECT_LT(seconds_since(t0), 1.0);
  j = minimal();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "(a|aa)+b"}}}, {"content", "x"}};
  expect_error(j, "regex '(a|aa)+b' is too costly to match");
}

// Found by scripts/fuzz-long (tokenizer_json_fuzz, 5 s timeout): Replace "\d{0}" inserts its
// content between every two characters and a second one multiplies that (120 MB from a short
// text). Text that normalizers grow without bound is refused when the tokenizer loads.
TEST(TokenizerErrors, NormalizersThatBlowUpTextAreRejected) {
  json j = minimal();
  const std::string big(2000, 'z');
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "\\d{0}"}}}, {"content", "x"}};
  expect_error(j, "normalizer Replace: pattern '\\d{0}' matches the empty string");
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Replace"}, {"pattern", {{"Regex", "."}}}, {"content", big}},
                       {{"type", "Replace"}, {"pattern", {{"String", "z"}}}, {"content", big}}}}};
  auto t0 = std::chrono::steady_clock::now();
  expect_error(j, "normalizer grows a");
  // Refused before growing 120 MB (which takes minutes); a loose bound, for loaded CI machines.
  EXPECT_LT(seconds_since(t0), 5.0);
  // What real tokenizers do (SentencePiece-style " " -> U+2581, then a prepend) still loads.
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  EXPECT_TRUE(Tokenizer::from_json(j.dump(), "t.json").ok());
}

TEST(TokenizerErrors, DeepNestingIsRejected) {
  json n = {{"type", "NFC"}};
  for (int i = 0; i < 200; ++i) n = {{"type", "Sequence"}, {"normalizers", {n}}};
  json j = minimal();
  j["normalizer"] = n;
  expect_error(j, "nests deeper");
}

TEST(TokenizerErrors, MissingFileNamesThePath) {
  auto t = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("/nonexistent/tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace tq
