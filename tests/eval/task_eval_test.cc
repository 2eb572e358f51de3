#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "eval/gsm8k_answer.h"
#include "eval/paired.h"
#include "eval/task_items.h"

namespace tq::eval {
namespace {

TEST(Gsm8kAnswer, StrictTakesTheFirstStatedAnswer) {
  EXPECT_EQ(gsm8k_strict("So 3 + 4 = 7. The answer is 7.\n\nQ: x. The answer is 9."), "7");
  EXPECT_EQ(gsm8k_strict("The answer is 1,200. Done"), "1,200.");  // the harness's greedy class
  EXPECT_EQ(gsm8k_strict("The answer is -5!"), "-5");
  EXPECT_EQ(gsm8k_strict("It is 7."), "[invalid]");
  // The regex's final '.' is any character: at the very end it takes the last digit.
  EXPECT_EQ(gsm8k_strict("The answer is 18"), "1");
}

TEST(Gsm8kAnswer, FlexibleTakesTheLastNumber) {
  EXPECT_EQ(gsm8k_flexible("She pays $12 and then 3 more, 15 in all."), "15");
  EXPECT_EQ(gsm8k_flexible("Total: $1,250.50"), "$1,250.50");
  EXPECT_EQ(gsm8k_flexible("ends with 7"), "7");
  EXPECT_EQ(gsm8k_flexible("no digits"), "[invalid]");
}

TEST(Gsm8kAnswer, MatchNormalisesBothSides) {
  EXPECT_TRUE(gsm8k_match("$1,250.", "1250"));
  EXPECT_TRUE(gsm8k_match("18", "Janet makes 9 * 2 = 18\n#### 18"));
  EXPECT_FALSE(gsm8k_match("18.5", "18"));
  EXPECT_FALSE(gsm8k_match("[invalid]", "18"));
  EXPECT_EQ(gsm8k_cut("42.\n\nQ: next"), "42.\n\n");
}

TEST(TaskItems, HellaswagCleanupAsTheHarness) {
  EXPECT_EQ(hellaswag_clean("  How to cook [title] Boil water. [step] Add salt  now. "),
            "How to cook. Boil water. Add salt now.");
  EXPECT_EQ(hellaswag_clean("open [bracket"), "open [bracket");
  EXPECT_EQ(hellaswag_clean("a   b"), "a  b");  // one pass of "  " -> " ", as str.replace
}

TEST(TaskItems, SeededSubsetIsStableSortedAndDistinct) {
  auto a = seeded_subset(1000, 50, 7), b = seeded_subset(1000, 50, 7),
       c = seeded_subset(1000, 50, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), 50u);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LT(a[i - 1], a[i]);
  EXPECT_EQ(seeded_subset(5, 0, 1).size(), 5u);
  EXPECT_EQ(seeded_subset(5, 9, 1).size(), 5u);
}

TEST(TaskItems, TaskListExpandsSuites) {
  auto z = parse_task_list("zeroshot");
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->size(), 8u);
  auto two = parse_task_list("mmlu, gsm8k,mmlu");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<std::string>{"mmlu", "gsm8k"}));
  auto bad = parse_task_list("arc_easy,nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'nope'"), std::string::npos);
}

// A task file written here: the harness's prompt forms, and one error per malformed line.
TEST(TaskItems, BuildsHarnessPrompts) {
  auto dir = std::filesystem::temp_directory_path() / "tq_task_items_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "winogrande.jsonl")
      << R"({"sentence": "Ann gave Bo a book because _ was kind.", "option1": "Ann", "option2": "Bo", "answer": 1})"
      << "\n";
  std::ofstream(dir / "boolq.jsonl") << R"({"passage": "P.", "question": "is it", "label": 1})"
                                     << "\n"
                                     << R"({"passage": "P.", "question": "is it"})"
                                     << "\n";
  std::ofstream(dir / "lambada.jsonl") << R"({"text": "the cat sat on the mat"})"
                                       << "\n";
  auto w = load_task("winogrande", dir.string(), {});
  ASSERT_TRUE(w.ok()) << w.error().message;
  ASSERT_EQ(w->items[0].requests.size(), 2u);
  EXPECT_EQ(w->items[0].requests[1].context, "Ann gave Bo a book because Bo");
  EXPECT_EQ(w->items[0].requests[1].continuation, " was kind.");
  EXPECT_EQ(w->items[0].gold, 0);
  auto l = load_task("lambada", dir.string(), {});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->items[0].requests[0].context, "the cat sat on the");
  EXPECT_EQ(l->items[0].requests[0].continuation, " mat");
  auto b = load_task("boolq", dir.string(), {});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("boolq.jsonl:2"), std::string::npos) << b.error().message;
  auto missing = load_task("piqa", dir.string(), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("scripts/setup"), std::string::npos);
  TaskOptions shots;
  shots.shots = 3;
  EXPECT_FALSE(load_task("winogrande", dir.string(), shots).ok());
  std::filesystem::remove_all(dir);
}

TEST(Paired, McNemarAndBootstrap) {
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  EXPECT_NEAR(mcnemar_exact_p(0, 6), 2.0 / 64.0, 1e-12);
  EXPECT_NEAR(mcnemar_exact_p(3, 3), 1.0, 1e-12);
  std::vector<bool> base(200), cand(200);
  for (int i = 0; i < 200; ++i) {
    base[size_t(i)] = i % 2 == 0;
    cand[size_t(i)] = i % 2 == 0 || i % 5 == 1;  // gains 20 items, loses none
  }
  PairedDiff p = paired_diff(base, cand, 1000, 1);
  EXPECT_EQ(p.lost, 0);
  EXPECT_EQ(p.gained, 20);
  EXPECT_NEAR(p.diff, 0.1, 1e-12);
  EXPECT_LT(p.ci_lo, 0.1);
  EXPECT_GT(p.ci_hi, 0.1);
  EXPECT_GT(p.ci_lo, 0.0);
  EXPECT_LT(p.mcnemar_p, 1e-5);
}

}  // namespace
}  // namespace tq::eval
