// Oniguruma-compatible regexes on PCRE2, and the UTF-8 / Unicode helpers.
#include <gtest/gtest.h>

#include "text/regex.h"
#include "text/unicode.h"

namespace tq::text {
namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

Matches find(const char* pattern, std::string_view s) {
  auto re = Regex::compile(pattern, "test");
  EXPECT_TRUE(re.ok()) << (re.ok() ? "" : re.error().message);
  return re->find_all(s);
}

TEST(Regex, OnigClassesAreSpelledOut) {
  EXPECT_EQ(onig_to_pcre2("a\\sb"),
            "a[\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-"
            "\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}]b");
  EXPECT_EQ(onig_to_pcre2("[^\\s\\p{L}]").substr(0, 8), "[^\\x{9}-");
  EXPECT_EQ(onig_to_pcre2("\\\\s"), "\\\\s");  // an escaped backslash followed by 's'
  EXPECT_EQ(onig_to_pcre2("[]\\h]"), "[]0-9a-fA-F]");
}

TEST(Regex, WhiteSpaceIsOnigsNotPcre2s) {
  // U+180E is \s in PCRE2 but not in Oniguruma (nor in Unicode's White_Space)
  EXPECT_EQ(find("\\s+", "a\xE1\xA0\x8E b"), (Matches{{4, 5}}));
  EXPECT_EQ(find("\\s+", "a\xC2\x85\xE3\x80\x80"), (Matches{{1, 6}}));
}

TEST(Regex, Gpt2StyleSplitting) {
  const char* p = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  std::string s = "He's  here 42!\n";
  Matches m = find(p, s);
  std::vector<std::string> parts;
  for (auto [a, b] : m) parts.push_back(s.substr(a, b - a));
  EXPECT_EQ(parts, (std::vector<std::string>{"He", "'s", " ", " here", " 42", "!", "\n"}));
}

TEST(Regex, EmptyMatchesAdvanceLikeOnig) {
  // an empty match right after a match is skipped by one character
  EXPECT_EQ(find("a*", "baab"), (Matches{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(find("x?", ""), (Matches{{0, 0}}));
}

TEST(Regex, LiteralEscapesMetacharacters) {
  auto re = Regex::literal("a.b(c)", "test");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->find_all("a.b(c) axb(c)"), (Matches{{0, 6}}));
}

TEST(Regex, LimitsLeaveLongLinearMatchesWhole) {
  // The match limit bounds backtracking, not subject length: one match over 4 MB still works.
  std::string spaces(4 << 20, ' ');
  EXPECT_EQ(find("\\s+(?!\\S)|\\s+", spaces + "x"),
            (Matches{{0, spaces.size() - 1}, {spaces.size() - 1, spaces.size()}}));
  EXPECT_EQ(find(" ?\\p{L}+", std::string(1 << 20, 'a')), (Matches{{0, 1u << 20}}));
}

TEST(Regex, WholeMatchesAndCostChecks) {
  auto re = Regex::compile_whole("model\\.layers\\.\\d+\\..*_proj");
  ASSERT_TRUE(re.ok());
  EXPECT_TRUE(*re->match_whole("model.layers.3.mlp.up_proj"));
  EXPECT_FALSE(*re->match_whole("model.layers.3.mlp.up_proj.weight"));
  EXPECT_FALSE(*re->match_whole("xmodel.layers.3.mlp.up_proj"));
  EXPECT_TRUE(re->check_cost().ok());
  auto bad = Regex::compile_whole("(");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("missing closing parenthesis at offset 1", 0), 0u);
  auto costly = Regex::compile_whole("(.*.*)*X");
  ASSERT_TRUE(costly.ok());
  Status st = costly->check_cost();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "match limit exceeded on a run of 128 'a'");
  EXPECT_FALSE(costly->match_whole(std::string(40, 'a') + "X!").ok());
}

TEST(Unicode, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  // E4 B8 is a truncated 3-byte sequence: one replacement for both bytes
  EXPECT_EQ(utf8_lossy("\xE4\xB8"
                       "x"),
            "\xEF\xBF\xBD"
            "x");
  // surrogates (ED A0 80) and overlongs (C0 80) are invalid byte by byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));
}

TEST(Unicode, NormalFormsAndLowercase) {
  EXPECT_EQ(normalize_unicode("e\xCC\x81", NormalForm::kNFC), "\xC3\xA9");
  EXPECT_EQ(normalize_unicode("\xC3\xA9", NormalForm::kNFD), "e\xCC\x81");
  EXPECT_EQ(normalize_unicode("\xEF\xAC\x81", NormalForm::kNFKC), "fi");  // ligature fi
  EXPECT_EQ(lowercase("AbC\xC3\x89"), "abc\xC3\xA9");
  EXPECT_EQ(lowercase("\xC4\xB0"), "i\xCC\x87");  // İ lowercases to two characters
}

TEST(Unicode, CharacterClasses) {
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_FALSE(is_white_space(0x180E));
  EXPECT_TRUE(is_numeric(0x00B2));  // ² is No
  EXPECT_TRUE(is_numeric(0x216B));  // Ⅻ is Nl
  EXPECT_FALSE(is_numeric('x'));
  EXPECT_TRUE(is_word_char(0x0301));  // combining acute accent (Mn)
  EXPECT_FALSE(is_word_char('-'));
}

}  // namespace
}  // namespace tq::text
