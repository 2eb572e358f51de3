// Reads the oracle fixtures written by tests/oracle/dequant_fixture.py: cases.json (arrays as
// [offset, nbytes] into data.bin) plus the data.bin blob.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tq::testing {

struct Fixture {
  nlohmann::json meta;
  std::vector<uint8_t> blob;

  // The bytes of an [offset, nbytes] reference (empty for null); fails the test if out of range.
  std::span<const uint8_t> bytes(const nlohmann::json& ref) const {
    if (ref.is_null()) return {};
    uint64_t off = ref.at(0).get<uint64_t>(), n = ref.at(1).get<uint64_t>();
    EXPECT_LE(off, blob.size());
    EXPECT_LE(n, blob.size() - std::min<uint64_t>(off, blob.size()));
    if (off > blob.size() || n > blob.size() - off) return {};
    return {blob.data() + off, n};
  }
};

// Loads the fixture in the directory named by env_var; nullopt when the variable is unset.
inline std::optional<Fixture> load_fixture(const char* env_var) {
  const char* dir = std::getenv(env_var);
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  Fixture f;
  std::ifstream js(std::string(dir) + "/cases.json");
  EXPECT_TRUE(js.good()) << dir << "/cases.json";
  f.meta = nlohmann::json::parse(js);
  std::ifstream bin(std::string(dir) + "/data.bin", std::ios::binary);
  EXPECT_TRUE(bin.good()) << dir << "/data.bin";
  f.blob.assign(std::istreambuf_iterator<char>(bin), std::istreambuf_iterator<char>());
  return f;
}

}  // namespace tq::testing
