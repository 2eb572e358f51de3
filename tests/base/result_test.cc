#include "base/result.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

Result<int> half(int x) {
  if (x % 2) return err("odd value {}", x);
  return x / 2;
}

Result<int> quarter(int x) {
  TQ_TRY(int h, half(x));
  TQ_TRY(int q, half(h));
  return q;
}

TEST(ResultTest, PropagatesErrors) {
  EXPECT_EQ(quarter(8).value(), 2);
  auto r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "odd value 3");
}

}  // namespace
}  // namespace tq
