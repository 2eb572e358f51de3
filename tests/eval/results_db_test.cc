#include "eval/results_db.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "../testing/test_files.h"
#include "../testing/tiny_models.h"
#include "model/model_source.h"

namespace tq::eval {
namespace {

TEST(ResultsDb, AppendsAndReadsRows) {
  testing::TempDir dir;
  const std::string path = dir.file("sub/dir/results.sqlite");  // parents are created
  {
    auto db = ResultsDb::open(path);
    ASSERT_TRUE(db.ok()) << db.error().message;
    RunRecord r;
    r.kind = "ppl";
    r.artifact = "/models/a";
    r.model_fingerprint = "abc";
    r.protocol = "protocol=mlx L=512";
    r.result = {{"ppl", 12.5}, {"tokens_scored", 32704}};
    auto id = db->append(r);
    ASSERT_TRUE(id.ok()) << id.error().message;
    EXPECT_EQ(*id, 1);
  }
  RunRecord k;
  k.kind = "kl";
  k.artifact = "/models/q4";
  k.model_fingerprint = "def";
  k.base_artifact = "/models/a";
  k.base_fingerprint = "abc";
  k.result = {{"mean_kl", 0.01}};
  auto id2 = append_run(path, k);
  ASSERT_TRUE(id2.ok()) << id2.error().message;
  EXPECT_EQ(*id2, 2);

  auto db = ResultsDb::open(path);
  ASSERT_TRUE(db.ok());
  auto rows = db->runs();
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  const RunRecord& a = (*rows)[0];
  EXPECT_EQ(a.kind, "ppl");
  EXPECT_EQ(a.artifact, "/models/a");
  EXPECT_EQ(a.result["ppl"], 12.5);
  EXPECT_EQ(a.tool_version, TQ_VERSION);
  EXPECT_FALSE(a.base_artifact.has_value());
  EXPECT_EQ(a.time_utc.size(), 20u);  // 2025-01-01T00:00:00Z
  EXPECT_EQ(a.time_utc.back(), 'Z');
  EXPECT_NE(a.machine.find("; "), std::string::npos);
  const RunRecord& b = (*rows)[1];
  EXPECT_EQ(b.kind, "kl");
  EXPECT_EQ(b.base_fingerprint, "abc");
  EXPECT_EQ(b.result["mean_kl"], 0.01);
}

TEST(ResultsDb, RejectsForeignFilesAndOtherSchemaVersions) {
  testing::TempDir dir;
  testing::write_file(dir.file("not.sqlite"), std::string(4096, 'x'));
  auto bad = ResultsDb::open(dir.file("not.sqlite"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("not.sqlite"), std::string::npos);

  const std::string path = dir.file("r.sqlite");
  ASSERT_TRUE(ResultsDb::open(path).ok());
  // Simulate a file written by a newer tq.
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "UPDATE meta SET value='99'", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(h);
  auto newer = ResultsDb::open(path);
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.error().message.find("schema version 99"), std::string::npos);
}

TEST(ResultsDb, DefaultPathFollowsXdg) {
  const char* old = std::getenv("XDG_DATA_HOME");
  std::string saved = old ? old : "";
  ::setenv("XDG_DATA_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(default_results_db_path(), "/tmp/xdg/turboquant/results.sqlite");
  ::unsetenv("XDG_DATA_HOME");
  EXPECT_NE(default_results_db_path().find("/.local/share/turboquant/results.sqlite"),
            std::string::npos);
  if (old) ::setenv("XDG_DATA_HOME", saved.c_str(), 1);
}

// Same layout, one weight byte apart (as RTN and GPTQ conversions are): different fingerprints;
// the same files at another path: the same fingerprint.
TEST(ModelFingerprint, FollowsTheBytesNotThePath) {
  testing::TempDir a, b, c;
  testing::write_tiny_model(a, testing::tiny_json("llama"));
  auto fingerprint = [](const std::string& dir) {
    auto m = open_model(dir);
    EXPECT_TRUE(m.ok()) << m.error().message;
    auto fp = model_fingerprint(*m);
    EXPECT_TRUE(fp.ok()) << fp.error().message;
    return *fp;
  };
  namespace fs = std::filesystem;
  for (const auto* to : {&b, &c})
    for (const auto& e : fs::directory_iterator(a.path()))
      fs::copy_file(e.path(), fs::path(to->path()) / e.path().filename());
  const std::string fa = fingerprint(a.path());
  EXPECT_EQ(fa.size(), 64u);
  EXPECT_EQ(fingerprint(b.path()), fa);
  auto m = open_model(c.path());
  ASSERT_TRUE(m.ok());
  ASSERT_FALSE(m->weight_files.empty());
  std::string bytes = testing::read_file(m->weight_files[0]);
  bytes[bytes.size() - 3] ^= 0x01;  // inside the last tensor's data
  testing::write_file(m->weight_files[0], bytes);
  EXPECT_NE(fingerprint(c.path()), fa);
}

}  // namespace
}  // namespace tq::eval
