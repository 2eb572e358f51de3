// Integer kernels of packed_matmul_q8 for the codes that are not 4-bit affine nibbles: affine
// 2/3/5/6/8-bit (MLX's little-endian bit stream, 3/5/6-bit codes crossing bytes) and the E2M1
// codes of mxfp4/nvfp4. Textually included by packed_matmul_q8.cc inside each target's
// namespace, after the helpers it uses (DotU8S8, ScaleAt, DotF, Prefetch, ...).
//
// AVX3_DL (VBMI + VNNI): 64 codes per step unpacked to bytes by one vpermb (each quadword gets
// the `bits` source bytes of its 8 codes) and one vpmultishiftqb (code i of a quadword from bit
// i·bits), then vpdpbusd against both activation planes. AVX2/AVX3: 32 codes per block spread
// to 16-bit lanes by vpshufb (the two bytes a code lies in) and vpmullw (its bits moved to the
// high byte), then vpmaddwd against x16 = 256·q + r (fits int16 exactly).
// E2M1 codes run as affine ones: a 16-entry lookup to u = 2·value + 12 (0..24), so the weight
// is (s/2)·u - 6s, a scale and a bias per group like any affine code (StripScalesFp4).
// No include guard: each target's pass of foreach_target includes it once, and targets without
// int8 kernels (and clang's AVX3_DL) do not include it at all.

// Code k of a row as the integer the kernels multiply: the affine code, or 2·E2M1 + 12.
inline int32_t CodeValue(const uint8_t* row, int64_t k, int bits, bool fp4) {
  const uint32_t c = unpack_code(row, k, bits);
  return fp4 ? kFp4u[c] : static_cast<int32_t>(c);
}

// The last 32 columns of a row whose column count is not a multiple of the step (scalar).
template <typename S>
inline float TailQx(const PackedMatrix& w, const uint8_t* row, const S* sp, const int8_t* q,
                    const int8_t* rr, const float* d, bool fp4) {
  const int64_t cols = w.cols, k0 = cols - 32;
  const float dd = d[cols / 32 - 1] / 256.0f;
  float y = 0.0f;
  for (int64_t k = k0; k < cols;) {
    const int64_t g = k / w.group, ke = std::min(cols, (g + 1) * w.group);
    int32_t isum = 0;
    for (; k < ke; ++k) isum += CodeValue(row, k, w.bits, fp4) * (256 * q[k] + rr[k]);
    y += ScaleAt(sp, g) * dd * static_cast<float>(isum);
  }
  return y;
}

#if HWY_TARGET != HWY_AVX2
// Row i's result from its per-lane sums u[i] (as the chunk and step loops leave them): the
// lanes reduced, the scalar tail of a row whose columns are not a multiple of 64, the biases.
template <int R, bool kFp4, typename S>
HWY_INLINE void FinishRows(const PackedMatrix& w, const __m512* u, const uint8_t* const* rp,
                           const S* const* sp, const S* const* bp, const int8_t* q,
                           const int8_t* rr, const float* d, const float* gsum, float* out) {
  // Reduced in an unrolled loop: u[] indexed at run time would live on the stack.
  float ys[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) ys[i] = _mm512_reduce_add_ps(u[i]);
  for (int i = 0; i < R; ++i) {
    float y = ys[i];
    if (w.cols % 64 != 0) y += TailQx(w, rp[i], sp[i], q, rr, d, kFp4);
    out[i] = y + DotF(bp[i], gsum, w.groups());
  }
}
#endif

#if HWY_TARGET == HWY_AVX3_DL
// Unpacking 64 codes of `bits` bits (2..8) into bytes: vpermb gives each output quadword the
// `bits` source bytes of its 8 codes, vpmultishiftqb takes code i of a quadword from bit
// i·bits, a mask keeps the code. Natural order (Unpack64), or the order of a 128-code chunk
// (Unpack128): output quadword j of the first register holds codes 16j..16j+7, of the second
// 16j+8..16j+15, so lane l of both falls in the same 16 codes (block l/4, half (l/2)%2): one
// accumulator per lane serves 128 codes at every group size down to 16.
struct Unpack64Bytes {
  alignas(64) uint8_t idx[9][64];     // natural order
  alignas(64) uint8_t idx_a[9][64];   // chunk order, first register (two-source index)
  alignas(64) uint8_t idx_b[9][64];   // chunk order, second register
  alignas(64) uint8_t idx_ab[9][64];  // chunk order, both registers' bytes (bits <= 4)
  alignas(64) uint8_t ctrl[9][64];
  alignas(64) uint8_t ctrl_b[9][64];  // the second register's codes from idx_ab
  constexpr Unpack64Bytes() : idx(), idx_a(), idx_b(), idx_ab(), ctrl(), ctrl_b() {
    for (int bits = 0; bits <= 8; ++bits)
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 8; ++i) {
          idx[bits][8 * j + i] = static_cast<uint8_t>(std::min(j * bits + i, 63));
          idx_a[bits][8 * j + i] = static_cast<uint8_t>(std::min(2 * j * bits + i, 127));
          idx_b[bits][8 * j + i] = static_cast<uint8_t>(std::min((2 * j + 1) * bits + i, 127));
          idx_ab[bits][8 * j + i] = static_cast<uint8_t>(std::min(2 * j * bits + i, 63));
          ctrl[bits][8 * j + i] = static_cast<uint8_t>(i * bits);
          ctrl_b[bits][8 * j + i] = static_cast<uint8_t>((8 + i) * bits % 64);
        }
  }
};
inline constexpr Unpack64Bytes kUnpack64Bytes{};

struct Unpack64Tables {
  __m512i idx, idx_a, idx_b, idx_ab, ctrl, ctrl_b, mask;
  __mmask64 load;            // the 8·bits source bytes of 64 codes
  __mmask64 load_a, load_b;  // the 16·bits bytes of 128 codes, in two registers
};
inline Unpack64Tables MakeUnpack64(int bits) {
  const int chunk = 16 * bits;  // bytes of 128 codes
  auto first = [](int n) { return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; };
  return {_mm512_load_si512(kUnpack64Bytes.idx[bits]),
          _mm512_load_si512(kUnpack64Bytes.idx_a[bits]),
          _mm512_load_si512(kUnpack64Bytes.idx_b[bits]),
          _mm512_load_si512(kUnpack64Bytes.idx_ab[bits]),
          _mm512_load_si512(kUnpack64Bytes.ctrl[bits]),
          _mm512_load_si512(kUnpack64Bytes.ctrl_b[bits]),
          _mm512_set1_epi8(static_cast<char>((1 << bits) - 1)),
          first(8 * bits),
          first(std::min(chunk, 64)),
          first(std::max(chunk - 64, 0))};
}
inline __m512i Codes(const Unpack64Tables& t, __m512i gathered) {
  return _mm512_and_si512(_mm512_multishift_epi64_epi8(t.ctrl, gathered), t.mask);
}
inline __m512i Unpack64(const Unpack64Tables& t, const uint8_t* p) {
  return Codes(t, _mm512_permutexvar_epi8(t.idx, _mm512_maskz_loadu_epi8(t.load, p)));
}
// kTwo: the chunk's bytes pass 64 (5- and 6-bit), so the index reaches into a second register.
template <bool kTwo>
inline void Unpack128(const Unpack64Tables& t, const uint8_t* p, __m512i* a, __m512i* b) {
  const __m512i lo = _mm512_maskz_loadu_epi8(t.load_a, p);
  if constexpr (kTwo) {
    const __m512i hi = _mm512_maskz_loadu_epi8(t.load_b, p + 64);
    *a = Codes(t, _mm512_permutex2var_epi8(lo, t.idx_a, hi));
    *b = Codes(t, _mm512_permutex2var_epi8(lo, t.idx_b, hi));
  } else {
    // Codes 16j..16j+15 lie in 2·bits <= 8 bytes: one permutation gives quadword j all of
    // them, two shift controls take the first and the second eight.
    const __m512i v = _mm512_permutexvar_epi8(t.idx_ab, lo);
    *a = Codes(t, v);
    *b = _mm512_and_si512(_mm512_multishift_epi64_epi8(t.ctrl_b, v), t.mask);
  }
}

// x in Unpack128's order: per 128-chunk, the first 8 of every 16 values then the second 8
// (both planes); the columns after the last whole chunk as they are.
inline void ActChunkOrder(const ActQ8& xq, std::vector<int8_t>* qx, std::vector<int8_t>* rx) {
  const int64_t cols = xq.cols, full = cols / 128 * 128;
  qx->resize(static_cast<size_t>(xq.n * cols));
  rx->resize(static_cast<size_t>(xq.n * cols));
  for (int64_t t = 0; t < xq.n; ++t) {
    const int8_t* q = xq.q.data() + t * cols;
    const int8_t* r = xq.r.data() + t * cols;
    int8_t* oq = qx->data() + t * cols;
    int8_t* orr = rx->data() + t * cols;
    for (int64_t c = 0; c < full; c += 128)
      for (int half = 0; half < 2; ++half)
        for (int j = 0; j < 8; ++j)
          for (int i = 0; i < 8; ++i) {
            const int64_t from = c + 16 * j + 8 * half + i, to = c + 64 * half + 8 * j + i;
            oq[to] = q[from], orr[to] = r[from];
          }
    std::memcpy(oq + full, q + full, static_cast<size_t>(cols - full));
    std::memcpy(orr + full, r + full, static_cast<size_t>(cols - full));
  }
}

// tile.template operator()<kT>() for kT = nt (1..4): a tile's token count as a template argument.
template <typename F>
HWY_INLINE void WithTokens(int64_t nt, F& tile) {
  switch (nt) {
    case 1:
      tile.template operator()<1>();
      break;
    case 2:
      tile.template operator()<2>();
      break;
    case 3:
      tile.template operator()<3>();
      break;
    default:
      tile.template operator()<4>();
      break;
  }
}

// E2M1 codes to 2·value + 12.
inline __m512i LutFp4(__m512i v) {
  return _mm512_shuffle_epi8(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4u))), v);
}

// The 128-code chunks of R rows of narrow codes (qx, rx in ActChunkOrder): u[i] += row i's Σ
// per lane. kG: 16, 32 or 64 when the group is that small (16 only from f32 scales), else 0
// (one scale per chunk). kPf as in Q4Chunks.
template <int R, bool kFp4, bool kTwo, int kG, bool kPf, typename S>
HWY_INLINE void QxChunks(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                         const int8_t* qx, const int8_t* rx, const float* dv, int64_t pf, __m512* u,
                         int pn, int pt) {
  const int64_t full = w.cols / 128, chunk_bytes = 16 * w.bits;
  const int cshift = w.group >= 128 ? Log2(w.group / 128) : 0;
  const Unpack64Tables tab = MakeUnpack64(w.bits);
  for (int64_t c = 0; c < full; ++c) {
    const __m512i q1 = _mm512_loadu_si512(qx + 128 * c), q2 = _mm512_loadu_si512(qx + 128 * c + 64);
    const __m512i r1 = _mm512_loadu_si512(rx + 128 * c), r2 = _mm512_loadu_si512(rx + 128 * c + 64);
    const __m512 dvc = _mm512_loadu_ps(dv + 16 * c);
    const bool ahead = kPf && (pn == 1 || c % pn == pt);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = rp[i] + chunk_bytes * c;
      if (ahead) {
        Prefetch(p + pf);
        if constexpr (kTwo) Prefetch(p + pf + 64);  // 80 or 96 bytes a chunk
      }
      __m512i a, b;
      Unpack128<kTwo>(tab, p, &a, &b);
      if constexpr (kFp4) a = LutFp4(a), b = LutFp4(b);
      // 256·Σcode·q + Σcode·r, the residual products onto the shifted sum (as Q4Chunks).
      __m512i acc = _mm512_dpbusd_epi32(Zero512(), a, q1);
      acc = _mm512_slli_epi32(_mm512_dpbusd_epi32(acc, b, q2), 8);
      acc = _mm512_dpbusd_epi32(acc, a, r1);
      acc = _mm512_dpbusd_epi32(acc, b, r2);
      const __m512 sv = ChunkScales<kG>(sp[i], c, cshift);
      u[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dvc, sv), u[i]);
    }
  }
}

// Steps of 64 codes in natural order from step h0 on, of R rows: u[i] += row i's Σ per lane
// (lanes 0-7 on one 32-block of activations, 8-15 on the next). kUnpack: codes narrower than
// a byte (else 8-bit, loaded as they lie); kFp4: E2M1 codes. kG: 16 or 32 when the group is
// that small (a scale per 4 or 8 lanes; 16 only from f32 scales), else 0 (one scale per
// step). kPf as in Q4Chunks.
template <int R, bool kUnpack, bool kFp4, int kG, bool kPf, typename S>
HWY_INLINE void QxSteps(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                        const int8_t* q, const int8_t* rr, const float* dv8, int64_t h0, int64_t pf,
                        __m512* u, int pn, int pt) {
  const int64_t steps = w.cols / 64, step_bytes = 8 * w.bits;
  const Unpack64Tables tab = MakeUnpack64(kUnpack ? w.bits : 8);
  const __m512i idx16 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i idx64 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i bidx64 = BfIdx64();
  const int gshift = w.group >= 64 ? Log2(w.group / 64) : 0;
  for (int64_t h = h0; h < steps; ++h) {
    const __m512i qv = _mm512_loadu_si512(q + 64 * h), rv = _mm512_loadu_si512(rr + 64 * h);
    const __m512 dvh = _mm512_loadu_ps(dv8 + 16 * h);
    const bool ahead = kPf && (pn == 1 || h % pn == pt);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = rp[i] + step_bytes * h;
      __m512i v = kUnpack ? Unpack64(tab, p) : _mm512_loadu_si512(p);
      if (ahead) Prefetch(p + pf);
      if constexpr (kFp4) v = LutFp4(v);
      const __m512i a = _mm512_dpbusd_epi32(Zero512(), v, qv);
      const __m512i b = _mm512_dpbusd_epi32(Zero512(), v, rv);
      const __m512i acc = _mm512_add_epi32(_mm512_slli_epi32(a, 8), b);
      const S* si = sp[i];
      __m512 sv;
      if constexpr (kG == 0)
        sv = _mm512_set1_ps(ScaleAt(si, h >> gshift));
      else if constexpr (kG == 16)
        sv = _mm512_permutexvar_ps(idx16, _mm512_castps128_ps512(_mm_loadu_ps(si + 4 * h)));
      else if constexpr (std::is_same_v<S, float>)
        sv = _mm512_permutexvar_ps(idx64, _mm512_castps128_ps512(Load2(si + 2 * h)));
      else
        sv = BfLanes(bidx64, Load2Bf(si + 2 * h));
      u[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dvh, sv), u[i]);
    }
  }
}

// A row's chunks (narrow codes) and then its 64-code steps, kG / kGc the steps' and chunks'
// group cases. Inlined whole: the accumulators must stay in registers.
template <int R, bool kUnpack, bool kFp4, int kG, int kGc, typename S>
HWY_INLINE void QxRun(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                      const int8_t* q, const int8_t* rr, const int8_t* qx, const int8_t* rx,
                      const float* dv, const float* dv8, int64_t pf, __m512* u, int pn, int pt) {
  const int64_t h0 = kUnpack ? w.cols / 128 * 2 : 0;
  if constexpr (kUnpack) {
    if (w.bits > 4)
      pf ? QxChunks<R, kFp4, true, kGc, true>(w, rp, sp, qx, rx, dv, pf, u, pn, pt)
         : QxChunks<R, kFp4, true, kGc, false>(w, rp, sp, qx, rx, dv, pf, u, pn, pt);
    else
      pf ? QxChunks<R, kFp4, false, kGc, true>(w, rp, sp, qx, rx, dv, pf, u, pn, pt)
         : QxChunks<R, kFp4, false, kGc, false>(w, rp, sp, qx, rx, dv, pf, u, pn, pt);
  }
  if (h0 < w.cols / 64)
    pf ? QxSteps<R, kUnpack, kFp4, kG, true>(w, rp, sp, q, rr, dv8, h0, pf, u, pn, pt)
       : QxSteps<R, kUnpack, kFp4, kG, false>(w, rp, sp, q, rr, dv8, h0, pf, u, pn, pt);
}

// y of R rows of 8-bit affine codes (kUnpack false), narrower affine codes, or E2M1 codes
// (kFp4; f32 scales and biases from StripScalesFp4) for one token. Narrow codes run in 128-code
// chunks (qx, rx, dv), the rest of the row in 64-code steps (q, rr, dv8).
template <int R, bool kUnpack, bool kFp4, typename S>
inline void RowsQx(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                   const S* const* bp, const int8_t* q, const int8_t* rr, const int8_t* qx,
                   const int8_t* rx, const float* d, const float* dv, const float* dv8,
                   const float* gsum, float* out, int64_t pf, int pn = 1, int pt = 0) {
  __m512 u[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) u[i] = _mm512_setzero_ps();
  if constexpr (std::is_same_v<S, float>) {
    if (w.group == 16)
      QxRun<R, kUnpack, kFp4, 16, 16>(w, rp, sp, q, rr, qx, rx, dv, dv8, pf, u, pn, pt);
    else if (w.group == 32)
      QxRun<R, kUnpack, kFp4, 32, 32>(w, rp, sp, q, rr, qx, rx, dv, dv8, pf, u, pn, pt);
    else if (w.group == 64)
      QxRun<R, kUnpack, kFp4, 0, 64>(w, rp, sp, q, rr, qx, rx, dv, dv8, pf, u, pn, pt);
    else
      QxRun<R, kUnpack, kFp4, 0, 0>(w, rp, sp, q, rr, qx, rx, dv, dv8, pf, u, pn, pt);
  } else {
    if (w.group == 32)
      QxRun<R, kUnpack, kFp4, 32, 32>(w, rp, sp, q, rr, qx, rx, dv, dv8, pf, u, pn, pt);
    else if (w.group == 64)
      QxRun<R, kUnpack, kFp4, 0, 64>(w, rp, sp, q, rr, qx, rx, dv, dv8, pf, u, pn, pt);
    else
      QxRun<R, kUnpack, kFp4, 0, 0>(w, rp, sp, q, rr, qx, rx, dv, dv8, pf, u, pn, pt);
  }
  FinishRows<R, kFp4>(w, u, rp, sp, bp, q, rr, d, gsum, out);
}
#endif  // HWY_TARGET == HWY_AVX3_DL

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
// What Unpack32 needs for `bits`-bit codes (2..6): the 4·bits source bytes of 32 codes loaded
// as dwords, 128-bit lane 1 moved to code 16's byte (a dword boundary, or 2 bytes before one);
// register A takes codes 0-7 (lane 0) and 16-23 (lane 1), B codes 8-15 and 24-31, each in a
// 16-bit lane: the code's two bytes, multiplied by 2^(8 - bit offset), shifted down by 8.
struct Unpack32Tables {
  __m256i load, perm, shuf_a, shuf_b, mul_a, mul_b, mask;
};
inline Unpack32Tables MakeUnpack32(int bits) {
  alignas(32) int32_t ld[8], pm[8];
  alignas(32) uint8_t sa[32], sb[32];
  alignas(32) uint16_t ma[16], mb[16];
  const int o = 2 * bits / 4, off = 2 * bits % 4;
  for (int i = 0; i < 8; ++i) ld[i] = i < bits ? -1 : 0, pm[i] = i < 4 ? i : o + i - 4;
  for (int lane = 0; lane < 2; ++lane)
    for (int j = 0; j < 8; ++j)
      for (int half = 0; half < 2; ++half) {
        const int c = 8 * half + j;  // code within the lane's 16
        const int bit = c * bits, byte = (lane == 0 ? 0 : off) + bit / 8;
        uint8_t* s = half == 0 ? sa : sb;
        uint16_t* m = half == 0 ? ma : mb;
        s[16 * lane + 2 * j] = static_cast<uint8_t>(byte);
        s[16 * lane + 2 * j + 1] = static_cast<uint8_t>(byte + 1);
        m[8 * lane + j] = static_cast<uint16_t>(1u << (8 - bit % 8));
      }
  auto ld256 = [](const void* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); };
  return {ld256(ld),
          ld256(pm),
          ld256(sa),
          ld256(sb),
          ld256(ma),
          ld256(mb),
          _mm256_set1_epi16(static_cast<int16_t>((1 << bits) - 1))};
}
inline void Unpack32(const Unpack32Tables& t, const uint8_t* p, __m256i* a, __m256i* b) {
  const __m256i src = _mm256_maskload_epi32(reinterpret_cast<const int*>(p), t.load);
  const __m256i v = _mm256_permutevar8x32_epi32(src, t.perm);
  auto code = [&](__m256i shuf, __m256i mul) {
    return _mm256_and_si256(
        _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(v, shuf), mul), 8), t.mask);
  };
  *a = code(t.shuf_a, t.mul_a);
  *b = code(t.shuf_b, t.mul_b);
}

// x16 = 256·q + r per 32-block in Unpack32's order: x 0-7, 16-23, then 8-15, 24-31.
inline void ActX16(const ActQ8& xq, std::vector<int16_t>* out) {
  out->resize(static_cast<size_t>(xq.n * xq.cols));
  for (int64_t t = 0; t < xq.n; ++t)
    for (int64_t b = 0; b < xq.cols; b += 32) {
      const int64_t base = t * xq.cols + b;
      for (int j = 0; j < 32; ++j) {
        static constexpr int kFrom[4] = {0, 16, 8, 24};
        const int64_t k = base + kFrom[j / 8] + j % 8;
        (*out)[static_cast<size_t>(base + j)] = static_cast<int16_t>(256 * xq.q[k] + xq.r[k]);
      }
    }
}

// y of R rows of affine 2/3/5/6-bit or E2M1 (kFp4) codes for one token, 32 codes per block.
template <int R, bool kFp4, typename S>
inline void RowsQx256(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                      const S* const* bp, const int16_t* x16, const float* d, const float* gsum,
                      float* out, int64_t pf) {
  const Unpack32Tables tab = MakeUnpack32(w.bits);
  const __m256i lut =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4u)));
  const __m256i low = _mm256_set1_epi16(0xFF);
  const int64_t blocks = w.cols / 32, block_bytes = 4 * w.bits;
  const int gshift = w.group >= 32 ? Log2(w.group / 32) : 0;
  __m256 t[R];
  for (int i = 0; i < R; ++i) t[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x16 + 32 * b));
    const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x16 + 32 * b + 16));
    const float db = d[b] / 256.0f;
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = rp[i] + block_bytes * b;
      if (pf && (b & 1) == 0) Prefetch(p + pf);
      __m256i ca, cb;
      Unpack32(tab, p, &ca, &cb);
      if constexpr (kFp4) {  // the high byte looked up code 0: cleared
        ca = _mm256_and_si256(_mm256_shuffle_epi8(lut, ca), low);
        cb = _mm256_and_si256(_mm256_shuffle_epi8(lut, cb), low);
      }
      const __m256i acc = _mm256_add_epi32(_mm256_madd_epi16(ca, xa), _mm256_madd_epi16(cb, xb));
      // Lane 0 holds codes of the block's first 16, lane 1 of its last 16 (groups of 16).
      const __m256 sv = w.group == 16 ? _mm256_setr_m128(_mm_set1_ps(ScaleAt(sp[i], 2 * b)),
                                                         _mm_set1_ps(ScaleAt(sp[i], 2 * b + 1)))
                                      : _mm256_set1_ps(ScaleAt(sp[i], b >> gshift));
      t[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(_mm256_set1_ps(db), sv), t[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = HSum(t[i]) + DotF(bp[i], gsum, w.groups());
}
#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#if HWY_TARGET == HWY_AVX3
// RowsQx256's work two blocks (64 codes) at a time in 512-bit registers (AVX-512 BW without
// VBMI): one masked load of the 8·bits bytes, a dword permutation that gives each 256-bit half
// Unpack32's arrangement of its block, then the same vpshufb / vpmullw / vpmaddwd. Int32 lanes
// 0-7 sum block 2h, 8-15 block 2h + 1 (4 lanes per 16 codes).
template <int R, bool kFp4, typename S>
inline void RowsQx512w(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                       const S* const* bp, const int16_t* x16, const float* d, const float* dv8,
                       const int8_t* q, const int8_t* rr, const float* gsum, float* out,
                       int64_t pf) {
  const Unpack32Tables t = MakeUnpack32(w.bits);
  auto both = [](__m256i v) { return _mm512_broadcast_i64x4(v); };
  const int o = 2 * w.bits / 4, bits = w.bits;
  const __m512i perm =
      _mm512_setr_epi32(0, 1, 2, 3, o, o + 1, o + 2, o + 3, bits, bits + 1, bits + 2, bits + 3,
                        bits + o, bits + o + 1, bits + o + 2, bits + o + 3);
  const __m512i shuf_a = both(t.shuf_a), shuf_b = both(t.shuf_b);
  const __m512i mul_a = both(t.mul_a), mul_b = both(t.mul_b);
  const __m512i mask = _mm512_set1_epi16(static_cast<int16_t>((1 << bits) - 1));
  const __m512i lut =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4u)));
  const __m512i low = _mm512_set1_epi16(0xFF);
  const __mmask64 load = bits >= 8 ? ~__mmask64{0} : (__mmask64{1} << (8 * bits)) - 1;
  const int64_t steps = w.cols / 64, step_bytes = 8 * bits;
  const int gshift = w.group >= 64 ? Log2(w.group / 64) : 0;
  auto ld2 = [](const int16_t* a, const int16_t* b) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
  };
  __m512 u[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) u[i] = _mm512_setzero_ps();
  for (int64_t h = 0; h < steps; ++h) {
    const int16_t* xb = x16 + 64 * h;
    const __m512i xa = ld2(xb, xb + 32), xc = ld2(xb + 16, xb + 48);
    const __m512 dvh = _mm512_loadu_ps(dv8 + 16 * h);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = rp[i] + step_bytes * h;
      if (pf) Prefetch(p + pf);
      const __m512i v = _mm512_permutexvar_epi32(perm, _mm512_maskz_loadu_epi8(load, p));
      auto code = [&](__m512i shuf, __m512i mul) {
        __m512i c = _mm512_and_si512(
            _mm512_srli_epi16(_mm512_mullo_epi16(_mm512_shuffle_epi8(v, shuf), mul), 8), mask);
        if constexpr (kFp4) c = _mm512_and_si512(_mm512_shuffle_epi8(lut, c), low);
        return c;
      };
      const __m512i acc = _mm512_add_epi32(_mm512_madd_epi16(code(shuf_a, mul_a), xa),
                                           _mm512_madd_epi16(code(shuf_b, mul_b), xc));
      const S* si = sp[i];
      __m512 sv;
      if (w.group == 16)
        sv = _mm512_permutexvar_ps(
            _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
            _mm512_castps128_ps512(_mm_setr_ps(ScaleAt(si, 4 * h), ScaleAt(si, 4 * h + 1),
                                               ScaleAt(si, 4 * h + 2), ScaleAt(si, 4 * h + 3))));
      else if (w.group == 32)
        sv = _mm512_insertf32x8(_mm512_set1_ps(ScaleAt(si, 2 * h)),
                                _mm256_set1_ps(ScaleAt(si, 2 * h + 1)), 1);
      else
        sv = _mm512_set1_ps(ScaleAt(si, h >> gshift));
      u[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dvh, sv), u[i]);
    }
  }
  FinishRows<R, kFp4>(w, u, rp, sp, bp, q, rr, d, gsum, out);
}
#endif  // HWY_TARGET == HWY_AVX3
