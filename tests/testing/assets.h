// Tests over downloaded assets (models, tokenizer files, corpora): they skip when one is missing,
// except where assets are required (CI, ./scripts/test after setup), where a missing one fails.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tq::testing {

inline bool assets_required() {
  for (const char* name : {"CI", "TQ_REQUIRE_ASSETS"}) {
    const char* v = std::getenv(name);
    std::string s = v ? v : "";
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "1" || s == "true" || s == "yes") return true;
  }
  return false;
}

// `rel` under the asset cache ($TQ_CACHE, else ~/.cache/turboquant).
inline std::string asset_path(const std::string& rel) {
  const char* cache = std::getenv("TQ_CACHE");
  const char* home = std::getenv("HOME");
  std::string base =
      cache && *cache ? cache : std::string(home ? home : ".") + "/.cache/turboquant";
  return base + "/" + rel;
}

}  // namespace tq::testing

// Leaves the test when `what_is_missing` is non-empty: a skip, or a failure where assets are
// required.
#define TQ_MISSING_ASSET(what_is_missing)                                                   \
  if (const std::string tq_missing_ = (what_is_missing); !tq_missing_.empty()) {            \
    if (::tq::testing::assets_required()) GTEST_FAIL() << "asset missing: " << tq_missing_; \
    GTEST_SKIP() << "asset missing: " << tq_missing_;                                       \
  }
// Leaves the test when the file or folder `path` does not exist.
#define TQ_REQUIRE_ASSET(path) \
  TQ_MISSING_ASSET(std::filesystem::exists(path) ? std::string() : std::string(path))
