// A fast 64-bit checksum (not cryptographic) for detecting damaged files and fingerprinting
// large model files: four lanes of 8-byte words, each step a bijection of its lane, so a change
// within one aligned 8-byte word always changes the result; other damage escapes with
// probability about 2^-64. Several GB/s, where SHA-256 runs at a few hundred MB/s.
#pragma once

#include <cstdint>
#include <span>

namespace tq {

uint64_t fast_hash64(std::span<const uint8_t> data, uint64_t seed = 0);

}  // namespace tq
