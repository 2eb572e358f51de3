// Batched products (prefill) on AVX3_DL with rows in the lanes: each strip of
// 32 rows is unpacked once into 4-code quads interleaved across 16 rows, so one vpdpbusd
// multiplies 16 rows by one token's 4 activations (a broadcast) and the sums stay in integers
// for a whole block of 32 columns. Against tiles of row × token pairs that convert and scale
// every 64-code step per pair, this is a third of the instructions per product.
// Textually included by packed_matmul_q8.cc after packed_codes_q8-inl.h (no include guard).
#if HWY_TARGET == HWY_AVX3_DL

constexpr int kLaneRows = 32, kLaneTokens = 4;
constexpr int64_t kLanePrefetch = 8192;  // bytes ahead in a prepacked strip stream

// o[j] = dword j of each r[l] in lane l: a 16×16 transpose of 4-byte elements.
HWY_INLINE void Transpose16x16(const __m512i* r, __m512i* o) {
  __m512i a[16], b[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // b[4m + c]: in 128-bit lane L, dword 4L + c of rows 4m..4m+3.
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    b[4 * m] = _mm512_unpacklo_epi64(a[4 * m], a[4 * m + 2]);
    b[4 * m + 1] = _mm512_unpackhi_epi64(a[4 * m], a[4 * m + 2]);
    b[4 * m + 2] = _mm512_unpacklo_epi64(a[4 * m + 1], a[4 * m + 3]);
    b[4 * m + 3] = _mm512_unpackhi_epi64(a[4 * m + 1], a[4 * m + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44);
    const __m512i e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i f0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i f1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    o[c] = _mm512_shuffle_i32x4(e0, f0, 0x88);
    o[4 + c] = _mm512_shuffle_i32x4(e0, f0, 0xDD);
    o[8 + c] = _mm512_shuffle_i32x4(e1, f1, 0x88);
    o[12 + c] = _mm512_shuffle_i32x4(e1, f1, 0xDD);
  }
}

// Rows [s0, s0 + m), columns [c0, c1) of w as quads: out[(j * 2 + v) * 64 + 4 * l + b] = code
// of row s0 + 16v + l at column c0 + 4j + b (missing rows repeat the last one).
inline void InterleaveStrip(const PackedMatrix& w, const Unpack64Tables& tab, bool fp4, int64_t s0,
                            int64_t m, int64_t c0, int64_t c1, uint8_t* out) {
  const int64_t step_bytes = 8 * w.bits, rb = w.row_bytes();
  for (int v = 0; v < 2; ++v) {
    const uint8_t* rows[16];
    for (int l = 0; l < 16; ++l)
      rows[l] = w.data + (s0 + std::min<int64_t>(16 * v + l, m - 1)) * rb;
    for (int64_t h = 0; h < (c1 - c0) / 64; ++h) {
      __m512i r[16], o[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) {
        r[l] = Unpack64(tab, rows[l] + step_bytes * (c0 / 64 + h));
        if (fp4) r[l] = LutFp4(r[l]);
      }
      Transpose16x16(r, o);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(out + ((16 * h + j) * 2 + v) * 64, o[j]);
    }
  }
}

// A strip's quads nibble-packed (pack_lanes): quad J of rows 16v + l at byte 64 J + 4 l + b,
// v = 0 in the low nibbles, v = 1 in the high ones (out: 16 · cols bytes).
inline void PackLanesStrip(const PackedMatrix& w, int64_t s0, uint8_t* out) {
  const Unpack64Tables tab = MakeUnpack64(w.bits);
  const int64_t m = std::min<int64_t>(kLaneRows, w.rows - s0);
  alignas(64) uint8_t wq[kLaneRows * 64];
  for (int64_t c0 = 0; c0 < w.cols; c0 += 64) {
    InterleaveStrip(w, tab, false, s0, m, c0, c0 + 64, wq);
    for (int j = 0; j < 16; ++j) {
      const __m512i a = _mm512_load_si512(wq + j * 128), b = _mm512_load_si512(wq + j * 128 + 64);
      _mm512_storeu_si512(out + (c0 / 4 + j) * 64, _mm512_or_si512(a, _mm512_slli_epi16(b, 4)));
    }
  }
}

// 32 rows × kT tokens over columns [c0, c1) (wq: those columns' quads), continuing the sums in
// acc[t * 32 + row]. A block of 32 columns (one activation scale d per token) sums codes × q
// and codes × r in integers, then adds (256·A + B)·s·d/256 in f32, s the rows' weight scale
// for the block (per 16 columns at groups of 16): the same operations whatever the chunks.
template <int kT, bool kG16, bool kPacked>
HWY_INLINE void LaneTile(int64_t c0, int64_t c1, int64_t group, const uint8_t* wq, const float* st,
                         const float* bt, const int8_t* const* q, const int8_t* const* r,
                         const float* const* dv, const float* const* gs, float* io,
                         int64_t pf = 0) {
  constexpr int kSub = kG16 ? 2 : 1, kQuads = 8 / kSub;  // flushes per block, quads per flush
  __m512 acc[2][kT];
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) {
    acc[0][t] = _mm512_loadu_ps(io + t * kLaneRows);
    acc[1][t] = _mm512_loadu_ps(io + t * kLaneRows + 16);
  }
  for (int64_t b = c0 / 32; b < c1 / 32; ++b) {
#pragma GCC unroll 2
    for (int sub = 0; sub < kSub; ++sub) {
      __m512i A[2][kT], B[2][kT];
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) A[0][t] = A[1][t] = B[0][t] = B[1][t] = _mm512_setzero_si512();
      const int64_t k0 = b * 32 + sub * 16 * (kSub - 1);
      const uint8_t* wp = wq + ((k0 - c0) / 4) * (kPacked ? 64 : 128);
#pragma GCC unroll 8
      for (int j = 0; j < kQuads; ++j) {
        __m512i w0, w1;
        if constexpr (kPacked) {
          // Prepacked strips stream from L3 or DRAM in order: each load requests the line pf
          // bytes on, spread over the compute (packed_matmul_q8.cc Prefetch).
          Prefetch(wp + j * 64 + pf);
          const __m512i p = _mm512_loadu_si512(wp + j * 64), lo = _mm512_set1_epi8(0x0F);
          w0 = _mm512_and_si512(p, lo);
          w1 = _mm512_and_si512(_mm512_srli_epi16(p, 4), lo);
        } else {
          w0 = _mm512_loadu_si512(wp + j * 128);
          w1 = _mm512_loadu_si512(wp + j * 128 + 64);
        }
#pragma GCC unroll 4
        for (int t = 0; t < kT; ++t) {
          int32_t qq, rr;
          std::memcpy(&qq, q[t] + k0 + 4 * j, 4);
          std::memcpy(&rr, r[t] + k0 + 4 * j, 4);
          const __m512i qb = _mm512_set1_epi32(qq), rb = _mm512_set1_epi32(rr);
          A[0][t] = _mm512_dpbusd_epi32(A[0][t], w0, qb);
          A[1][t] = _mm512_dpbusd_epi32(A[1][t], w1, qb);
          B[0][t] = _mm512_dpbusd_epi32(B[0][t], w0, rb);
          B[1][t] = _mm512_dpbusd_epi32(B[1][t], w1, rb);
        }
      }
      const int64_t g = k0 / group;
      const __m512 s0 = _mm512_loadu_ps(st + g * kLaneRows);
      const __m512 s1 = _mm512_loadu_ps(st + g * kLaneRows + 16);
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) {
        const __m512 d = _mm512_set1_ps(dv[t][8 * b]);
        const __m512i a0 = _mm512_add_epi32(_mm512_slli_epi32(A[0][t], 8), B[0][t]);
        const __m512i a1 = _mm512_add_epi32(_mm512_slli_epi32(A[1][t], 8), B[1][t]);
        acc[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_mul_ps(s0, d), acc[0][t]);
        acc[1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_mul_ps(s1, d), acc[1][t]);
      }
      if ((k0 + 32 / kSub) % group == 0) {  // the group's bias term: b·Σx
        const __m512 b0 = _mm512_loadu_ps(bt + g * kLaneRows);
        const __m512 b1 = _mm512_loadu_ps(bt + g * kLaneRows + 16);
#pragma GCC unroll 4
        for (int t = 0; t < kT; ++t) {
          const __m512 x = _mm512_set1_ps(gs[t][g]);
          acc[0][t] = _mm512_fmadd_ps(b0, x, acc[0][t]);
          acc[1][t] = _mm512_fmadd_ps(b1, x, acc[1][t]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) {
    _mm512_storeu_ps(io + t * kLaneRows, acc[0][t]);
    _mm512_storeu_ps(io + t * kLaneRows + 16, acc[1][t]);
  }
}

// out[g * 32 + i] = v[min(i, m - 1) * G + g] for g < G, i < 32, by 16×16 transposes: per call,
// so small batches feel a scalar loop here.
inline void ByGroup(const float* v, int64_t G, int64_t m, float* out) {
  for (int64_t g0 = 0; g0 < G; g0 += 16) {
    const int64_t left = std::min<int64_t>(16, G - g0);
    const auto k = static_cast<__mmask16>((1u << left) - 1);
    for (int h = 0; h < 2; ++h) {
      __m512i r[16], o[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l)
        r[l] = _mm512_maskz_loadu_epi32(k, v + std::min<int64_t>(16 * h + l, m - 1) * G + g0);
      Transpose16x16(r, o);
      for (int64_t j = 0; j < left; ++j)
        _mm512_storeu_si512(out + (g0 + j) * kLaneRows + 16 * h, o[j]);
    }
  }
}

// Rows [r0, r1) for every token of xq (gsum: Σx per group per token, G per token); every affine
// width, mxfp4 and nvfp4.
// A strip's quads are made kChunk columns at a time, so they stay in L1 while the tokens pass.
inline void GemmLanes(const PackedMatrix& w, const ActQ8& xq, const float* gsum, float* y,
                      int64_t ldy, int64_t r0, int64_t r1) {
  constexpr int64_t kChunk = 512;
  const int64_t cols = w.cols, G = w.groups(), n = xq.n, nb = cols / 32;
  const bool fp4 = w.format != WeightFormat::kAffine;
  const Unpack64Tables tab = MakeUnpack64(w.bits);
  thread_local std::vector<uint8_t> wq;
  thread_local std::vector<float> sc, sb, st, bt, acc;
  wq.resize(static_cast<size_t>(kLaneRows * std::min(cols, kChunk)));
  sc.resize(static_cast<size_t>(kLaneRows * G + kPad));
  sb.resize(static_cast<size_t>(kLaneRows * G + kPad));
  st.resize(static_cast<size_t>(G * kLaneRows));
  bt.resize(static_cast<size_t>(G * kLaneRows));
  acc.resize(static_cast<size_t>((n + kLaneTokens) * kLaneRows));
  // Prepacked strips lie at multiples of 32 rows; a range that starts elsewhere unpacks its own.
  const bool pre = w.lanes != nullptr && r0 % kLaneRows == 0;
  const auto es = static_cast<int64_t>(dtype_size(w.scale_dtype));
  for (int64_t s0 = r0; s0 < r1; s0 += kLaneRows) {
    const int64_t m = std::min<int64_t>(kLaneRows, r1 - s0);
    const float *sg = st.data(), *bg = bt.data();  // scales and biases as [group][row]
    if (pre) {
      const uint8_t* ls = w.lane_scales + (s0 / kLaneRows) * 2 * G * kLaneRows * es;
      if (s0 + kLaneRows < r1)  // the next strip's scales and biases
        for (int64_t o = 0; o < 2 * G * kLaneRows * es; o += 64)
          Prefetch(ls + 2 * G * kLaneRows * es + o);
      if (w.scale_dtype == DType::kF32) {
        sg = reinterpret_cast<const float*>(ls), bg = sg + G * kLaneRows;
      } else {
        ToF32(w.scale_dtype, ls, 0, G * kLaneRows, st.data());
        ToF32(w.scale_dtype, ls, G * kLaneRows, G * kLaneRows, bt.data());
      }
    } else {
      if (fp4)
        StripScalesFp4(w, s0, m, sc.data(), sb.data());
      else
        StripScales(w, s0, m, sc.data(), sb.data());
      ByGroup(sc.data(), G, m, st.data());
      ByGroup(sb.data(), G, m, bt.data());
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
      const int64_t c1 = std::min(cols, c0 + kChunk);
      const uint8_t* src = pre ? w.lanes + (s0 / kLaneRows) * 16 * cols + c0 / 4 * 64 : wq.data();
      if (!pre) InterleaveStrip(w, tab, fp4, s0, m, c0, c1, wq.data());
      for (int64_t t0 = 0; t0 < n; t0 += kLaneTokens) {
        const int8_t *tq[kLaneTokens], *tr[kLaneTokens];
        const float *td[kLaneTokens], *tg[kLaneTokens];
        for (int t = 0; t < kLaneTokens; ++t) {
          const int64_t tt = std::min<int64_t>(t0 + t, n - 1);
          tq[t] = xq.q.data() + tt * cols, tr[t] = xq.r.data() + tt * cols;
          td[t] = xq.dv8.data() + tt * nb * 8;  // d / 256 of block b at [8 b]
          tg[t] = gsum + tt * G;
        }
        float* io = acc.data() + t0 * kLaneRows;
        auto tile = [&]<int kT>() {
          const int64_t pf = kLanePrefetch;
          if (w.group == 16 && pre)
            LaneTile<kT, true, true>(c0, c1, w.group, src, sg, bg, tq, tr, td, tg, io, pf);
          else if (w.group == 16)
            LaneTile<kT, true, false>(c0, c1, w.group, src, sg, bg, tq, tr, td, tg, io);
          else if (pre)
            LaneTile<kT, false, true>(c0, c1, w.group, src, sg, bg, tq, tr, td, tg, io, pf);
          else
            LaneTile<kT, false, false>(c0, c1, w.group, src, sg, bg, tq, tr, td, tg, io);
        };
        WithTokens(std::min<int64_t>(kLaneTokens, n - t0), tile);
      }
    }
    // Rows past m are not stored.
    for (int64_t t = 0; t < n; ++t)
      for (int v = 0; v < 2 && 16 * v < m; ++v) {
        const int64_t left = std::min<int64_t>(16, m - 16 * v);
        _mm512_mask_storeu_ps(y + t * ldy + s0 + 16 * v, static_cast<__mmask16>((1u << left) - 1),
                              _mm512_loadu_ps(acc.data() + t * kLaneRows + 16 * v));
      }
  }
}

#endif  // HWY_TARGET == HWY_AVX3_DL
