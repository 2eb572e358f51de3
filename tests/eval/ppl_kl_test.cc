#include <gtest/gtest.h>

#include "eval/kl.h"
#include "eval/ppl.h"

namespace tq::eval {
namespace {

TEST(PplRun, ErrorsNameTheMissingText) {
  PplRequest r;
  r.model = "/nonexistent/model";
  r.text = "/nonexistent/text.txt";
  r.show_progress = false;
  auto res = run_ppl(r);
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.error().message.find("/nonexistent/text.txt"), std::string::npos);
}

TEST(KlRun, TakesExactlyOneBase) {
  KlRequest r;
  r.candidate = "c";
  r.text = "/nonexistent/text.txt";
  r.show_progress = false;
  EXPECT_FALSE(run_kl(r).ok());  // neither a base model nor a file
  r.base = "b";
  r.base_logits = "f";
  EXPECT_FALSE(run_kl(r).ok());  // both
  r.base.clear();
  r.save_base = "s";
  EXPECT_FALSE(run_kl(r).ok());  // saving rows read from a file
}

TEST(KlRun, JsonNamesTheFileOrNull) {
  KlResult r;
  EXPECT_TRUE(kl_json(r)["base_logits"].is_null());
  r.base_logits = "base.tqlogits";
  r.candidate = "cand";
  EXPECT_EQ(kl_json(r)["base_logits"], "base.tqlogits");
  const RunRecord rec = kl_record(r);
  EXPECT_EQ(rec.kind, "kl");
  EXPECT_EQ(rec.artifact, "cand");
  EXPECT_EQ(rec.result, kl_json(r));
}

}  // namespace
}  // namespace tq::eval
