#include "io/staging_dir.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>

namespace tq {
namespace {

namespace fs = std::filesystem;

struct TempRoot {
  fs::path p =
      fs::temp_directory_path() / fs::path("tq_staging_test_" + std::to_string(::getpid()));
  TempRoot() { fs::create_directories(p); }
  ~TempRoot() { fs::remove_all(p); }
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(p)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
};

TEST(StagingDir, PublishesIntoPlaceAndLeavesNothingElse) {
  TempRoot root;
  std::string dest = (root.p / "out").string();
  auto s = StagingDir::create(dest, false);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s->path().starts_with(dest + ".tmp-"));
  ASSERT_TRUE(s->write_file("a.json", "{}\n").ok());
  EXPECT_FALSE(fs::exists(dest));  // nothing visible before publish
  ASSERT_TRUE(s->publish().ok());
  EXPECT_EQ(root.names(), std::vector<std::string>{"out"});
  std::ifstream in(dest + "/a.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "{}\n");
  EXPECT_EQ(fs::status(dest).permissions() & fs::perms::others_read, fs::perms::others_read);
}

TEST(StagingDir, UnpublishedStagingIsRemoved) {
  TempRoot root;
  {
    auto s = StagingDir::create((root.p / "out").string(), false);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->write_file("x", "partial").ok());
  }
  EXPECT_TRUE(root.names().empty());
}

TEST(StagingDir, RefusesNonEmptyUnlessReplacing) {
  TempRoot root;
  fs::create_directories(root.p / "out");
  std::ofstream(root.p / "out" / "old.txt") << "old";
  std::string dest = (root.p / "out").string();
  auto refused = StagingDir::create(dest, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            dest + ": exists and is not empty (use --force to replace it)");
  auto s = StagingDir::create(dest, true);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->write_file("new.txt", "new").ok());
  ASSERT_TRUE(s->publish().ok());
  EXPECT_FALSE(fs::exists(root.p / "out" / "old.txt"));
  EXPECT_TRUE(fs::exists(root.p / "out" / "new.txt"));
  EXPECT_EQ(root.names(), std::vector<std::string>{"out"});
  // An empty existing directory needs no --force.
  fs::create_directories(root.p / "empty");
  auto e = StagingDir::create((root.p / "empty").string(), false);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(e->publish().ok());
  EXPECT_EQ(root.names(), (std::vector<std::string>{"empty", "out"}));
}

TEST(StagingDir, MissingParentIsAnError) {
  auto s = StagingDir::create("/nonexistent-dir-tq/sub/out", false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "/nonexistent-dir-tq/sub/out: parent directory does not exist");
}

}  // namespace
}  // namespace tq
