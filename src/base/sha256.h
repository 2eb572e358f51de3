// SHA-256 (FIPS 180-4) for fingerprints and text hashes in protocol strings.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"

namespace tq {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> data);
  void update(std::string_view s) {
    update({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  std::string hex_digest();  // 64 lowercase hex digits

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes hashed so far
};

std::string sha256_hex(std::string_view data);
// Hashes a whole file by streaming it (errors name `path`).
Result<std::string> sha256_file(const std::string& path);

}  // namespace tq
