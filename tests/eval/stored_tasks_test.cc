#include "eval/stored_tasks.h"

#include <gtest/gtest.h>

namespace tq::eval {
namespace {

using nlohmann::json;

Task two_items() {
  Task t;
  t.name = "piqa";
  t.kind = TaskKind::kChoice;
  for (int64_t doc : {3, 9}) {
    TaskItem it;
    it.doc = doc;
    it.requests = {{"Goal: x\nSolution:", " a"}, {"Goal: x\nSolution:", " b"}};
    it.choices = {"a", "b"};
    it.gold = int(doc % 2);
    t.items.push_back(it);
  }
  return t;
}

// A paired run: model "cand" against base "src", each side with its runtime and protocol.
RunRecord paired_run(int64_t id, const Task& t, const std::string& digest) {
  RunRecord r;
  r.id = id;
  r.kind = "eval";
  r.model_fingerprint = "cand";
  r.base_fingerprint = "src";
  r.result = {{"runtime", "fast A"}, {"base_runtime", "fast B"}};
  json task = {
      {"task", t.name},
      {"protocol", "P"},
      {"base_protocol", "PB"},
      {"items_sha256", digest},
      {"metrics", {{"acc", 0.5}, {"acc_se", 0.5}, {"acc_norm", 1.0}, {"acc_norm_se", 0}}},
      {"base_metrics", {{"acc", 0}, {"acc_se", 0}, {"acc_norm", 0.5}, {"acc_norm_se", 0.5}}},
      {"items", {{3, 1, 1}, {9, 0, 1}}},
      {"base_items", {{3, 0, 1}, {9, 0, 0}}}};
  r.result["tasks"] = json::array({task});
  return r;
}

TEST(StoredTasks, ItemsHashSeesEveryField) {
  const Task t = two_items();
  const std::string h = task_items_sha256(t);
  EXPECT_EQ(h, task_items_sha256(two_items()));
  Task other = two_items();
  other.items[1].gold = 0;
  EXPECT_NE(task_items_sha256(other), h);
  other = two_items();
  other.items[0].requests[1].continuation = " c";
  EXPECT_NE(task_items_sha256(other), h);
  other = two_items();
  other.items.pop_back();
  EXPECT_NE(task_items_sha256(other), h);
  // Field boundaries count: "ab" + "c" is not "a" + "bc".
  other = two_items();
  other.items[0].requests[0] = {"Goal: x\nSolution: ", "a"};
  EXPECT_NE(task_items_sha256(other), h);
}

TEST(StoredTasks, FindsEitherSideOnlyWhenEverythingMatches) {
  const Task t = two_items();
  const std::string d = task_items_sha256(t);
  const std::vector<RunRecord> runs = {paired_run(4, t, d)};

  auto cand = find_stored_task(runs, t, {"cand", "fast A", "P", d});
  ASSERT_TRUE(cand);
  EXPECT_EQ(cand->run_id, 4);
  ASSERT_EQ(cand->scores.items.size(), 2u);
  EXPECT_TRUE(cand->scores.items[0].hit[0]);
  EXPECT_FALSE(cand->scores.items[1].hit[0]);
  EXPECT_EQ(cand->scores.items[1].doc, 9);
  ASSERT_EQ(cand->scores.metrics.size(), 2u);
  EXPECT_EQ(cand->scores.metrics[1].name, "acc_norm");
  EXPECT_EQ(cand->scores.metrics[1].value.mean, 1.0);

  auto src = find_stored_task(runs, t, {"src", "fast B", "PB", d});
  ASSERT_TRUE(src);
  EXPECT_FALSE(src->scores.items[0].hit[0]);
  EXPECT_TRUE(src->scores.items[0].hit[1]);
  EXPECT_EQ(src->scores.metrics[0].value.mean, 0.0);

  // Any one of fingerprint, runtime, protocol or items differing: scored again.
  EXPECT_FALSE(find_stored_task(runs, t, {"other", "fast A", "P", d}));
  EXPECT_FALSE(find_stored_task(runs, t, {"cand", "fast B", "P", d}));
  EXPECT_FALSE(find_stored_task(runs, t, {"cand", "fast A", "PB", d}));
  EXPECT_FALSE(find_stored_task(runs, t, {"src", "fast A", "PB", d}));
  EXPECT_FALSE(find_stored_task(runs, t, {"cand", "fast A", "P", "x"}));
  Task renamed = two_items();
  renamed.name = "arc_easy";
  EXPECT_FALSE(find_stored_task(runs, renamed, {"cand", "fast A", "P", d}));
}

TEST(StoredTasks, NewestRunWinsAndDamagedRowsAreSkipped) {
  const Task t = two_items();
  const std::string d = task_items_sha256(t);
  std::vector<RunRecord> runs = {paired_run(1, t, d), paired_run(2, t, d), paired_run(3, t, d),
                                 paired_run(5, t, d)};
  runs[1].result["tasks"][0]["metrics"]["acc"] = 0.25;
  runs[2].result["tasks"][0]["items"] = {{9, 0, 1}, {3, 1, 1}};  // another item order
  runs[3].result["tasks"][0]["metrics"] = "broken";
  auto hit = find_stored_task(runs, t, {"cand", "fast A", "P", d});
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->run_id, 2);
  EXPECT_EQ(hit->scores.metrics[0].value.mean, 0.25);
  // Not an eval row, no tasks array, items of the wrong shape: never read.
  RunRecord ppl = paired_run(7, t, d);
  ppl.kind = "ppl";
  RunRecord empty = paired_run(8, t, d);
  empty.result = json::object();
  RunRecord shape = paired_run(9, t, d);
  shape.result["tasks"][0]["items"] = {{3, 1}, {9, 0}};
  EXPECT_FALSE(find_stored_task({ppl, empty, shape}, t, {"cand", "fast A", "P", d}));
}

}  // namespace
}  // namespace tq::eval
