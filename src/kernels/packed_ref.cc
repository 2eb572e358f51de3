// Scalar references of the packed kernels and the int8 activation quantizer.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/mlx_quant.h"
#include "kernels/packed_matmul.h"

namespace tq {

void packed_matmul_ref(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy,
                       int64_t r0, int64_t r1) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = r0; r < r1; ++r) {
    packed_decode_row_ref(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * w.cols;
      double acc = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) acc += static_cast<double>(xt[k]) * row[k];
      y[t * ldy + r] = static_cast<float>(acc);
    }
  }
}

void quantize_block_q8(const float* x, int len, int8_t* q, int8_t* r, float* d, float* sum) {
  float amax = 0.0f;
  for (int i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  int32_t qs = 0;
  for (int i = 0; i < len; ++i) {
    const float v = x[i] * id;
    const long qi = std::lrintf(v);
    const long ri = std::clamp<long>(std::lrintf(256.0f * (v - static_cast<float>(qi))), -127, 127);
    q[i] = static_cast<int8_t>(qi), r[i] = static_cast<int8_t>(ri);
    qs += static_cast<int32_t>(256 * qi + ri);
  }
  *d = amax / 127.0f;
  *sum = *d / 256.0f * static_cast<float>(qs);
}

void quantize_act_q8(const float* x, int64_t n, int64_t cols, ActQ8* out) {
  act_q8_init(n, cols, out);
  quantize_act_q8_tokens(x, 0, n, out);
}

void act_q8_init(int64_t n, int64_t cols, ActQ8* out) {
  const int64_t nb = cols / 32;
  out->n = n, out->cols = cols;
  for (auto* v : {&out->q, &out->r, &out->q4, &out->r4}) v->resize(static_cast<size_t>(n * cols));
  out->d.resize(static_cast<size_t>(n * nb));
  out->sum.resize(static_cast<size_t>(n * nb));
  out->dv.resize(static_cast<size_t>(n * (cols / 64) * 8));
  out->dv8.resize(static_cast<size_t>(n * (cols / 64) * 16));
}

void quantize_act_q8_tokens(const float* x, int64_t t0, int64_t t1, ActQ8* out, bool nibbles) {
  const int64_t cols = out->cols, nb = cols / 32;
  for (int64_t t = t0; t < t1; ++t) {
    const float* xt = x + t * cols;
    int8_t* q = out->q.data() + t * cols;
    int8_t* r = out->r.data() + t * cols;
    quantize_blocks_q8(xt, 32, nb, q, r, &out->d[t * nb], &out->sum[t * nb]);
    // Nibble order: byte j of a 64-code half holds k = 2j (low nibble) and 2j+1 (high).
    for (int plane = 0; plane < (nibbles ? 2 : 0); ++plane) {
      const int8_t* src = plane == 0 ? q : r;
      int8_t* q4 = (plane == 0 ? out->q4 : out->r4).data() + t * cols;
      int64_t c = 0;
      for (; c + 128 <= cols; c += 128)
        for (int j = 0; j < 32; ++j) {
          q4[c + j] = src[c + 2 * j], q4[c + 32 + j] = src[c + 64 + 2 * j];
          q4[c + 64 + j] = src[c + 2 * j + 1], q4[c + 96 + j] = src[c + 64 + 2 * j + 1];
        }
      if (c + 64 <= cols) {
        for (int j = 0; j < 32; ++j)
          q4[c + j] = src[c + 2 * j], q4[c + 32 + j] = src[c + 2 * j + 1];
        c += 64;
      }
      if (c < cols) std::memcpy(q4 + c, src + c, static_cast<size_t>(cols - c));
    }
    float* dv = out->dv.data() + t * (cols / 64) * 8;
    float* dv8 = out->dv8.data() + t * (cols / 64) * 16;
    for (int64_t h = 0; h < cols / 64; ++h) {
      for (int i = 0; i < 8; ++i) dv[h * 8 + i] = out->d[t * nb + 2 * h + i / 4] / 256.0f;
      for (int i = 0; i < 16; ++i) dv8[h * 16 + i] = out->d[t * nb + 2 * h + i / 8] / 256.0f;
    }
  }
}

void packed_matmul_q8_ref(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                          int64_t r1) {
  static constexpr int kFp4x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const bool affine = w.format == WeightFormat::kAffine;
  const int64_t nb = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes();
    for (int64_t t = 0; t < xq.n; ++t) {
      const int8_t* q = xq.q.data() + t * w.cols;
      const int8_t* rr = xq.r.data() + t * w.cols;
      double acc = 0.0;
      for (int64_t g = 0; g < w.groups(); ++g) {
        const int64_t gi = r * w.groups() + g, k0 = g * w.group, k1 = k0 + w.group;
        // Affine: the code; mxfp4/nvfp4: 2·E2M1 with half the scale.
        float s = 0.0f, bias = 0.0f;
        if (affine) {
          s = scale_at(w.scale_dtype, w.scales, gi);
          bias = scale_at(w.scale_dtype, w.biases, gi);
        } else {
          s = 0.5f * (w.format == WeightFormat::kNvfp4 ? e4m3_to_f32(w.scales[gi])
                                                       : e8m0_to_f32(w.scales[gi]));
        }
        double inner = 0.0, xsum = 0.0;
        for (int64_t k = k0; k < k1;) {  // the group's runs within one 32-block of x
          const int64_t b = k / 32, ke = std::min(k1, (b + 1) * 32);
          int32_t isum = 0;
          for (; k < ke; ++k) {
            const uint32_t c = unpack_code(row, k, w.bits);
            const int32_t v = affine ? static_cast<int32_t>(c) : kFp4x2[c];
            isum += v * (256 * q[k] + rr[k]);
          }
          inner += static_cast<double>(xq.d[t * nb + b]) / 256.0 * isum;
          if (affine && ke % 32 == 0) xsum += xq.sum[t * nb + b];
        }
        acc += s * inner + bias * xsum;
      }
      y[t * ldy + r] = static_cast<float>(acc);
    }
  }
}

}  // namespace tq
