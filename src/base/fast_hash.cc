#include "base/fast_hash.h"

#include <cstring>

namespace tq {
namespace {

constexpr uint64_t kMul1 = 0x9e3779b97f4a7c15ULL;  // odd: multiplication is a bijection
constexpr uint64_t kMul2 = 0xd6e8feb86659fd93ULL;
constexpr uint64_t kMul3 = 0xa0761d6478bd642fULL;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// One word into a lane: a bijection of the lane for each word, and of the word for each lane.
uint64_t step(uint64_t lane, uint64_t word) { return rotl(lane ^ (word * kMul1), 29) * kMul2; }

uint64_t finish(uint64_t x) {  // avalanche
  x ^= x >> 32;
  x *= kMul3;
  x ^= x >> 29;
  x *= kMul2;
  x ^= x >> 32;
  return x;
}

uint64_t load(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64): the files are not moved across
}

}  // namespace

uint64_t fast_hash64(std::span<const uint8_t> data, uint64_t seed) {
  uint64_t lane[4] = {seed ^ 0x243f6a8885a308d3ULL, seed ^ 0x13198a2e03707344ULL,
                      seed ^ 0xa4093822299f31d0ULL, seed ^ 0x082efa98ec4e6c89ULL};
  const uint8_t* p = data.data();
  size_t n = data.size();
  for (; n >= 32; p += 32, n -= 32)
    for (int i = 0; i < 4; ++i) lane[i] = step(lane[i], load(p + 8 * i));
  uint8_t tail[32] = {};  // the last words, zero-padded; the length tells padding apart
  std::memcpy(tail, p, n);
  for (size_t i = 0; i * 8 < n; ++i) lane[i] = step(lane[i], load(tail + 8 * i));
  uint64_t h = data.size();
  for (uint64_t l : lane) h = h * kMul3 + finish(l);  // a bijection of each lane in turn
  return finish(h);
}

}  // namespace tq
