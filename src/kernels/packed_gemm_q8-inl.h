// Batched products of 8-bit codes on AVX3_DL: the codes are bytes where they lie, and tiles of
// 4 rows × 4 tokens keep 16 accumulators in registers, so a row's codes and a token's
// activations are each loaded once per tile, not once per pair. They meet x in the per-token
// kernel's order with its per-lane sums, so each token gets the bits it gets alone: batches
// that must keep them (speculative checks); prefills take the lanes (packed_gemm_lanes-inl.h).
// Textually included by packed_matmul_q8.cc after packed_codes_q8-inl.h (no include guard).
#if HWY_TARGET == HWY_AVX3_DL

constexpr int kTileRows = 4, kTileTokens = 4;
// From this many tokens on, the lanes; below, the per-token kernels (no unpacked copy), except
// 8-bit codes, whose tiles keep the per-token bits and take batches from two tokens on.
constexpr int64_t kGemmMinTokens = 16;

// 4 rows (codes[i], f32 scales sc[i]) × 4 tokens (planes q[t], r[t], block scales dv8[t]):
// out[t * 4 + i] = Σ over the row of s·d·(256·Σcode·q + Σcode·r). kG: 16 or 32 for groups that
// small (a scale per 4 or 8 lanes of a 64-code step), else 0 (one scale per step).
template <int kG, int kT>
HWY_INLINE void GemmTile(int64_t steps, int gshift, const uint8_t* const* codes,
                         const float* const* sc, const int8_t* const* q, const int8_t* const* r,
                         const float* const* dv8, float* out, int64_t pf) {
  const __m512i idx16 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i idx64 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 acc[kTileRows][kT];
#pragma GCC unroll 4
  for (int i = 0; i < kTileRows; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t h = 0; h < steps; ++h) {
    __m512i wv[kTileRows];
    __m512 sv[kTileRows];
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i) {
      if (pf) Prefetch(codes[i] + 64 * h + pf);
      wv[i] = _mm512_loadu_si512(codes[i] + 64 * h);
      if constexpr (kG == 0)
        sv[i] = _mm512_set1_ps(sc[i][h >> gshift]);
      else if constexpr (kG == 16)
        sv[i] = _mm512_permutexvar_ps(idx16, _mm512_castps128_ps512(_mm_loadu_ps(sc[i] + 4 * h)));
      else
        sv[i] = _mm512_permutexvar_ps(idx64, _mm512_castps128_ps512(Load2(sc[i] + 2 * h)));
    }
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const __m512i qv = _mm512_loadu_si512(q[t] + 64 * h), rv = _mm512_loadu_si512(r[t] + 64 * h);
      const __m512 dv = _mm512_loadu_ps(dv8[t] + 16 * h);
#pragma GCC unroll 4
      for (int i = 0; i < kTileRows; ++i) {
        __m512i a = _mm512_slli_epi32(_mm512_dpbusd_epi32(Zero512(), wv[i], qv), 8);
        a = _mm512_dpbusd_epi32(a, wv[i], rv);
        acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(dv, sv[i]), acc[i][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t)
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i) out[t * kTileRows + i] = _mm512_reduce_add_ps(acc[i][t]);
}

// Rows [r0, r1) of 8-bit codes for every token of xq (gsum: Σx per group per token, G per token).
// Rows go in the decode kernels' order (kernels/strip_plan.h) and are requested as far ahead:
// without that the tiles waited on every row, from the last-level cache and from DRAM alike.
inline void GemmQ8(const PackedMatrix& w, const ActQ8& xq, const float* gsum, float* y, int64_t ldy,
                   int64_t r0, int64_t r1, bool parts) {
  const int64_t cols = w.cols, G = w.groups(), steps = cols / 64, n = xq.n;
  const int gshift = w.group >= 64 ? Log2(w.group / 64) : 0;
  const StripPlan plan(w, r0, r1, parts);
  const int64_t pf = strip_prefetch_distance(w, plan);
  thread_local std::vector<float> sc, sb;
  sc.resize(static_cast<size_t>(8 * G + kPad));
  sb.resize(static_cast<size_t>(8 * G + kPad));
  float out[kTileRows * kTileTokens];
  for (int64_t k = 0; k < plan.strips; ++k) {
    int64_t seg0[8], seg_n[8], idx[8];
    const int nseg = plan.segments(k, seg0, seg_n);
    int m = 0;
    for (int sg = 0; sg < nseg; ++sg) {
      StripScales(w, seg0[sg], seg_n[sg], sc.data() + m * G, sb.data() + m * G);
      for (int64_t i = 0; i < seg_n[sg]; ++i) idx[m++] = seg0[sg] + i;
    }
    for (int i0 = 0; i0 < m; i0 += kTileRows) {
      // A tile's missing rows repeat its last one (computed, not stored).
      const uint8_t* tc[kTileRows];
      const float* ts[kTileRows];
      for (int i = 0; i < kTileRows; ++i) {
        const int ri = std::min(i0 + i, m - 1);
        tc[i] = w.data + idx[ri] * cols, ts[i] = sc.data() + ri * G;
      }
      for (int64_t t0 = 0; t0 < n; t0 += kTileTokens) {
        const int8_t *tq[kTileTokens], *tr[kTileTokens];
        const float* td[kTileTokens];
        for (int t = 0; t < kTileTokens; ++t) {
          const int64_t tt = std::min<int64_t>(t0 + t, n - 1);
          tq[t] = xq.q.data() + tt * cols, tr[t] = xq.r.data() + tt * cols;
          td[t] = xq.dv8.data() + tt * steps * 16;
        }
        // The last tile of a batch takes only the tokens left (a small batch is all of them);
        // the first one over a row requests its codes ahead.
        const int64_t tpf = t0 == 0 ? pf : 0;
        auto tile = [&]<int kT>() {
          if (w.group == 16)
            GemmTile<16, kT>(steps, gshift, tc, ts, tq, tr, td, out, tpf);
          else if (w.group == 32)
            GemmTile<32, kT>(steps, gshift, tc, ts, tq, tr, td, out, tpf);
          else
            GemmTile<0, kT>(steps, gshift, tc, ts, tq, tr, td, out, tpf);
        };
        WithTokens(std::min<int64_t>(kTileTokens, n - t0), tile);
        for (int t = 0; t < kTileTokens && t0 + t < n; ++t)
          for (int i = 0; i < kTileRows && i0 + i < m; ++i)
            y[(t0 + t) * ldy + idx[i0 + i]] =
                out[t * kTileRows + i] + DotF(sb.data() + (i0 + i) * G, gsum + (t0 + t) * G, G);
      }
    }
  }
}

#endif  // HWY_TARGET == HWY_AVX3_DL
