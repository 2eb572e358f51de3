#include "eval/scoring.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../testing/test_files.h"
#include "eval/base_logits_file.h"

namespace tq::eval {
namespace {

constexpr int64_t kVocab = 12;

// A stand-in model: the logits at a position depend on the input token there and on the
// position (a bigram table plus a position term), so windows must be fed from position 0.
struct FakeModel {
  std::vector<float> table;  // [kVocab, kVocab]
  float pos_scale = 0.05f;
  int calls = 0;

  explicit FakeModel(uint32_t seed, float noise = 0.0f, const FakeModel* like = nullptr) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 2.0f);
    table.resize(kVocab * kVocab);
    for (size_t i = 0; i < table.size(); ++i)
      table[i] = like ? like->table[i] + noise * d(rng) : d(rng);
  }
  std::span<const float> row(int32_t tok) const { return {table.data() + tok * kVocab, kVocab}; }
  float logit(int32_t tok, int64_t pos, int64_t j) const {
    return row(tok)[j] + pos_scale * float(pos) * float(j % 3);
  }
  LogitsModel as_model() {
    return {kVocab, [this](std::span<const int32_t> toks, std::span<float> out) -> Status {
              ++calls;
              if (out.size() != toks.size() * kVocab) return err("bad logits size");
              for (size_t p = 0; p < toks.size(); ++p)
                for (int64_t j = 0; j < kVocab; ++j)
                  out[p * kVocab + j] = logit(toks[p], int64_t(p), j);
              return ok_status();
            }};
  }
};

Windows test_windows(Protocol proto, int64_t L, int n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> toks(n_tokens);
  for (auto& t : toks) t = int32_t(rng() % kVocab);
  auto w = make_windows(toks, {proto, L, 0, BosMode::kNo}, {}, "t");
  EXPECT_TRUE(w.ok());
  return std::move(w).value();
}

TEST(Scoring, NllMatchesHandComputationPerWindow) {
  FakeModel m(1);
  Windows w = test_windows(Protocol::kMlx, 5, 23, 9);  // 4 windows of 5, 4 targets each
  auto nll = score_nll(m.as_model(), w);
  ASSERT_TRUE(nll.ok()) << nll.error().message;
  ASSERT_EQ(nll->size(), 16u);
  EXPECT_EQ(m.calls, 4);
  for (int64_t i = 0; i < w.count; ++i) {
    auto win = w.window(i);
    for (int64_t t = 1; t < 5; ++t) {
      // Row at position t-1 (window-relative) predicts token t.
      double s = 0;
      for (int64_t j = 0; j < kVocab; ++j) s += std::exp(double(m.logit(win[t - 1], t - 1, j)));
      double want = std::log(s) - double(m.logit(win[t - 1], t - 1, win[t]));
      EXPECT_NEAR((*nll)[i * 4 + (t - 1)], want, 1e-6);
    }
  }
}

TEST(Scoring, LlamaCppScoresOnlyTheSecondHalf) {
  FakeModel m(2);
  Windows w = test_windows(Protocol::kLlamaCpp, 8, 20, 3);  // 2 chunks, targets 5..7
  auto nll = score_nll(m.as_model(), w);
  ASSERT_TRUE(nll.ok());
  ASSERT_EQ(nll->size(), 6u);
  auto win = w.window(1);
  std::vector<float> row(kVocab);
  for (int64_t j = 0; j < kVocab; ++j) row[j] = m.logit(win[4], 4, j);
  EXPECT_NEAR((*nll)[3], token_nll(row, win[5]), 1e-9);
}

TEST(Scoring, ModelErrorsAndBadIdsStopTheRun) {
  Windows w = test_windows(Protocol::kMlx, 4, 8, 1);
  LogitsModel failing{kVocab, [](auto, auto) -> Status { return err("m.gguf: boom"); }};
  auto r = score_nll(failing, w);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "m.gguf: boom");
  FakeModel m(1);
  LogitsModel small = m.as_model();
  small.vocab = 2;  // token ids of the windows exceed it
  EXPECT_FALSE(score_nll(small, w).ok());
}

TEST(Scoring, KlOfAModelWithItselfIsExactlyZero) {
  FakeModel a(5);
  Windows w = test_windows(Protocol::kMlx, 6, 40, 4);
  LogitsModel am = a.as_model();
  auto t = score_kl(w, &am, nullptr, am, nullptr);
  ASSERT_TRUE(t.ok()) << t.error().message;
  KlReport r = kl_report(*t);
  EXPECT_EQ(r.tokens, w.tokens_scored());
  EXPECT_EQ(r.kl.max, 0.0);
  EXPECT_EQ(r.kl.mean, 0.0);
  EXPECT_EQ(r.top1_agreement, 1.0);
  EXPECT_EQ(r.flips, 0);
  EXPECT_EQ(r.ppl_ratio, 1.0);
}

TEST(Scoring, KlAgainstANoisyCopy) {
  FakeModel a(5), b(6, 0.5f, &a);
  Windows w = test_windows(Protocol::kMlx, 6, 60, 4);
  LogitsModel am = a.as_model(), bm = b.as_model();
  auto t = score_kl(w, &am, nullptr, bm, nullptr);
  ASSERT_TRUE(t.ok());
  // Independent recomputation of every token.
  double sum = 0;
  int64_t agree = 0, n = 0;
  for (int64_t i = 0; i < w.count; ++i) {
    auto win = w.window(i);
    for (int64_t p = 0; p + 1 < w.seq_len; ++p) {
      std::vector<float> ra(kVocab), rb(kVocab);
      for (int64_t j = 0; j < kVocab; ++j) {
        ra[j] = a.logit(win[p], p, j);
        rb[j] = b.logit(win[p], p, j);
      }
      double la = logsumexp(ra), lb = logsumexp(rb), kl = 0;
      for (int64_t j = 0; j < kVocab; ++j)
        kl += std::exp(ra[j] - la) * ((ra[j] - la) - (rb[j] - lb));
      sum += kl;
      agree += argmax(ra) == argmax(rb);
      ++n;
    }
  }
  KlReport r = kl_report(*t);
  EXPECT_GT(r.kl.mean, 0.0);
  EXPECT_NEAR(r.kl.mean, sum / double(n), 1e-6 * sum / double(n));
  EXPECT_DOUBLE_EQ(r.top1_agreement, double(agree) / double(n));
  EXPECT_EQ(r.flips, n - agree);
  EXPECT_GE(r.kl.max, r.kl.p99);
  EXPECT_GE(r.kl.p99, r.kl.p90);
  EXPECT_GE(r.kl.p90, r.kl.median);
}

TEST(Scoring, FlipsOnBaseTiesAreCounted) {
  KlTokens t;
  TokenCompare c;
  c.argmax_base = 1;
  c.argmax_cand = 2;
  c.base_gap = 0.0f;
  t.add(c);
  c.base_gap = 0.5f;
  t.add(c);
  c.argmax_cand = 1;
  t.add(c);
  EXPECT_EQ(t.flips, 2);
  EXPECT_EQ(t.flip_ties, 1);
  EXPECT_EQ(t.agree, 1);
}

BaseLogitsHeader header_for(const Windows& w, int64_t top_k) {
  BaseLogitsHeader h;
  h.text_sha256 = "feed";
  h.protocol = w.protocol;
  h.seq_len = w.seq_len;
  h.windows = w.count;
  h.bos = w.bos;
  h.first_target = w.first_target;
  h.vocab = kVocab;
  h.top_k = top_k;
  h.model = "base-model";
  h.model_fingerprint = "fp";
  return h;
}

TEST(Scoring, SavedBaseRowsReproduceTheDirectComparison) {
  FakeModel a(5), b(6, 0.5f, &a);
  for (Protocol proto : {Protocol::kMlx, Protocol::kLlamaCpp}) {
    Windows w = test_windows(proto, 8, 50, 4);
    LogitsModel am = a.as_model(), bm = b.as_model();
    testing::TempDir dir;
    for (int64_t k : {int64_t(0), int64_t(3), kVocab}) {
      std::string path = dir.file("base" + std::to_string(k) + ".tqlogits");
      auto writer = BaseLogitsWriter::create(path, header_for(w, k));
      ASSERT_TRUE(writer.ok()) << writer.error().message;
      auto direct = score_kl(w, &am, nullptr, bm, &*writer);
      ASSERT_TRUE(direct.ok());
      ASSERT_TRUE(writer->finish().ok());
      auto reader = BaseLogitsReader::open(path);
      ASSERT_TRUE(reader.ok()) << reader.error().message;
      ASSERT_TRUE(reader->check_matches(w, "feed", kVocab).ok());
      auto from_file = score_kl(w, nullptr, &*reader, bm, nullptr);
      ASSERT_TRUE(from_file.ok());
      KlReport d = kl_report(*direct), f = kl_report(*from_file);
      EXPECT_EQ(f.base.ppl, d.base.ppl) << k;  // base NLL exact in both forms
      EXPECT_EQ(f.cand.ppl, d.cand.ppl);
      EXPECT_EQ(f.top1_agreement, d.top1_agreement);
      EXPECT_EQ(f.flip_ties, d.flip_ties);
      if (k == 0) {
        EXPECT_EQ(f.kl.mean, d.kl.mean);
      } else if (k == kVocab) {
        EXPECT_NEAR(f.kl.mean, d.kl.mean, 1e-6 * d.kl.mean);  // f32 vs f64 exp of the weights
      } else {
        EXPECT_LT(f.kl.mean, d.kl.mean);
        EXPECT_GT(f.kl.mean, 0.3 * d.kl.mean);
      }
      // The base against its own saved rows: exactly 0 in both forms.
      auto self = score_kl(w, nullptr, &*reader, am, nullptr);
      ASSERT_TRUE(self.ok());
      EXPECT_EQ(kl_report(*self).kl.max, 0.0) << k;
    }
  }
}

TEST(Scoring, BaseFileMismatchesAreClearErrors) {
  FakeModel a(5);
  LogitsModel am = a.as_model();
  Windows w = test_windows(Protocol::kMlx, 8, 50, 4);
  testing::TempDir dir;
  std::string path = dir.file("b.tqlogits");
  auto writer = BaseLogitsWriter::create(path, header_for(w, 0));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(score_kl(w, &am, nullptr, am, &*writer).ok());
  ASSERT_TRUE(writer->finish().ok());
  auto r = BaseLogitsReader::open(path);
  ASSERT_TRUE(r.ok());
  auto msg = [&](const Status& s) { return s.ok() ? std::string("ok") : s.error().message; };
  EXPECT_NE(msg(r->check_matches(w, "other", kVocab)).find("sha256"), std::string::npos);
  EXPECT_NE(msg(r->check_matches(w, "feed", kVocab + 1)).find("vocabulary"), std::string::npos);
  Windows fewer = test_windows(Protocol::kMlx, 8, 40, 4);
  EXPECT_NE(msg(r->check_matches(fewer, "feed", kVocab)).find("windows=6"), std::string::npos);
  Windows other = test_windows(Protocol::kMlx, 8, 50, 5);
  EXPECT_NE(msg(r->check_matches(other, "feed", kVocab)).find("other token ids"),
            std::string::npos);

  // Truncated, foreign and garbage files.
  std::string bytes = testing::read_file(path);
  testing::write_file(dir.file("trunc"), bytes.substr(0, bytes.size() - 4));
  auto t = BaseLogitsReader::open(dir.file("trunc"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("does not match its header"), std::string::npos);
  testing::write_file(dir.file("foreign"), "GGUF and more bytes here");
  EXPECT_FALSE(BaseLogitsReader::open(dir.file("foreign")).ok());
  std::string huge = bytes;
  huge[8] = '\xff';  // header length past EOF
  testing::write_file(dir.file("huge"), huge);
  EXPECT_FALSE(BaseLogitsReader::open(dir.file("huge")).ok());
}

TEST(Scoring, UnfinishedBaseFileLeavesNothing) {
  testing::TempDir dir;
  Windows w = test_windows(Protocol::kMlx, 8, 50, 4);
  {
    auto writer = BaseLogitsWriter::create(dir.file("b"), header_for(w, 0));
    ASSERT_TRUE(writer.ok());
    EXPECT_FALSE(writer->finish().ok());  // no windows written
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace tq::eval
