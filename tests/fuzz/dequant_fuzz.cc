// libFuzzer target: the MLX and GGML decoders must reject or decode any sizes and bytes
// without reading out of bounds. Half the inputs get consistent sizes so decoding is reached.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "formats/ggml_blocks.h"
#include "formats/mlx_quant.h"

namespace {

template <typename T>
T take(const uint8_t*& p, size_t& n) {
  T v{};
  size_t k = n < sizeof(T) ? n : sizeof(T);
  std::memcpy(&v, p, k);
  p += k;
  n -= k;
  return v;
}

void fuzz_mlx(uint8_t flags, uint8_t m, int64_t rows, int64_t cols, std::span<const uint8_t> in) {
  static const tq::QuantMode kModes[] = {tq::QuantMode::kAffine, tq::QuantMode::kMxfp4,
                                         tq::QuantMode::kNvfp4, tq::QuantMode::kMxfp8};
  static const tq::DType kScaleTypes[] = {tq::DType::kBF16, tq::DType::kF16,    tq::DType::kF32,
                                          tq::DType::kU8,   tq::DType::kF8E4M3, tq::DType::kF8E8M0};
  tq::QuantSpec spec{kModes[m % 4], 1 + (m >> 2) % 8, 16 << ((m >> 5) % 4)};
  tq::DType dt = kScaleTypes[(flags >> 2) % 6];
  if (flags & 2) {  // consistent sizes from the spec (when it is valid)
    if (spec.mode != tq::QuantMode::kAffine) spec = tq::default_spec_for_mode(spec.mode);
    if (spec.mode != tq::QuantMode::kAffine) dt = tq::DType::kU8;
    rows = rows % 8;
    cols = spec.group_size * (1 + cols % 4);
  }
  const int64_t groups = spec.group_size > 0 ? cols / spec.group_size : 0;
  const size_t sbytes = rows > 0 && groups > 0 ? rows * groups * tq::dtype_size(dt) : 0;
  const size_t wbytes = rows > 0 && cols > 0 ? rows * cols / 8 * spec.bits : 0;
  const size_t bbytes = tq::quant_mode_has_biases(spec.mode) ? sbytes : 0;
  std::vector<uint8_t> buf;
  std::span<const uint8_t> all = in;  // raw: arbitrary spans from the input
  if (flags & 2) {                    // sizes are small here: rows < 8, cols <= 512
    buf.resize(wbytes + sbytes + bbytes);
    if (!buf.empty() && !in.empty())
      std::memcpy(buf.data(), in.data(), std::min(buf.size(), in.size()));
    all = buf;
  }
  size_t w = std::min(wbytes, all.size()), s = std::min(sbytes, all.size() - w);
  size_t b = std::min(bbytes, all.size() - w - s);
  std::vector<float> out(rows > 0 && cols > 0 && rows * cols <= (1 << 16) ? rows * cols : 8);
  (void)tq::dequantize_mlx(spec, rows, cols, all.first(w), dt, all.subspan(w, s),
                           all.subspan(w + s, b), out);
}

void fuzz_ggml(uint8_t flags, uint32_t type, int64_t count, std::span<const uint8_t> in) {
  auto info = tq::ggml_type_info(type);
  if ((flags & 2) && info) {  // a whole number of blocks from the input
    count = static_cast<int64_t>(in.size()) / info->block_bytes * info->block_elems;
    in = in.first(static_cast<size_t>(count / info->block_elems * info->block_bytes));
  }
  std::vector<float> out(count >= 0 && count <= (1 << 16) ? count : 8);
  (void)tq::dequantize_ggml(type, in, count, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* p = data;
  size_t n = size;
  const uint8_t flags = take<uint8_t>(p, n), m = take<uint8_t>(p, n);
  const int64_t a = take<int16_t>(p, n), b = take<int16_t>(p, n);
  if (flags & 1)
    fuzz_mlx(flags, m, a, b, {p, n});
  else
    fuzz_ggml(flags, m % 48, a * b, {p, n});
  return 0;
}
