// Micro-benchmarks of the runtime's kernels on SmolLM2-135M / Llama-3.2-1B shapes (Google
// Benchmark; not a test). Weights are random codes: speed does not depend on the values.
// 1024x2048 (1.2 MB at 4-bit) stays in L2: the kernels' compute rate without DRAM.
//   build/tq_kernel_bench [--benchmark_filter='n:1/'] [--benchmark_min_time=0.2]
// BM_Matmul args: bits (16 = bf16, 41/42/48 = mxfp4/nvfp4/mxfp8), rows, cols, n tokens (1 =
// decode), q8 (1 = int8 activations, 2 = int8 activations on the AMX tile kernel, quantization
// included).
#define HWY_WANT_AVX3_DL  // list the same targets as the kernels compile
#include <benchmark/benchmark.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <random>
#include <vector>

#include "kernels/amx_matmul.h"
#include "kernels/gated_delta.h"
#include "kernels/packed_matmul.h"
#include "kernels/vec_ops.h"

namespace tq {
namespace {

struct Weights {
  std::vector<uint8_t> data, scales, biases;
  PackedMatrix m;
};

// Format codes of the bits argument beyond affine widths.
constexpr int kMxfp4 = 41, kNvfp4 = 42, kMxfp8 = 48;

// Affine `bits` g64 with bf16 scales (bits 16: a bf16 matrix; 41/42/48: mxfp4/nvfp4/mxfp8).
Weights make_weights(int bits, int64_t rows, int64_t cols) {
  Weights w;
  std::mt19937 rng(1);
  const int width = bits == kMxfp8 ? 8 : bits > 16 ? 4 : bits;
  w.data.resize(static_cast<size_t>(rows * cols * width / 8));
  for (auto& b : w.data) b = static_cast<uint8_t>(rng());
  if (bits > 16) {
    QuantSpec spec;
    spec.mode = bits == kMxfp4   ? QuantMode::kMxfp4
                : bits == kNvfp4 ? QuantMode::kNvfp4
                                 : QuantMode::kMxfp8;
    spec.bits = width, spec.group_size = bits == kNvfp4 ? 16 : 32;
    if (bits == kMxfp8)
      for (auto& b : w.data) b &= 0xBF;  // no NaN codes
    w.scales.assign(static_cast<size_t>(rows * cols / spec.group_size), 127);
    w.m = make_quant_matrix(spec, rows, cols, w.data, DType::kU8, w.scales, {}).value();
    return w;
  }
  if (bits == 16) {
    for (size_t i = 1; i < w.data.size(); i += 2) w.data[i] = 0x3C;  // finite bf16
    w.m = make_float_matrix(DType::kBF16, rows, cols, w.data).value();
    return w;
  }
  const size_t ng = static_cast<size_t>(rows * cols / 64);
  w.scales.assign(2 * ng, 0x3C), w.biases.assign(2 * ng, 0xBC);
  QuantSpec spec;
  spec.bits = bits, spec.group_size = 64;
  w.m = make_quant_matrix(spec, rows, cols, w.data, DType::kBF16, w.scales, w.biases).value();
  return w;
}

std::vector<float> make_x(int64_t n, int64_t cols) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (float& v : x) v = nd(rng);
  return x;
}

// args: bits, rows, cols, tokens, int8 (0: f32; 1: int8; 2: AMX; 3: batch kernels; 4: prepacked)
void BM_Matmul(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), n = st.range(3);
  const bool q8 = st.range(4) != 0, amx = st.range(4) == 2;
  Weights w = make_weights(bits, rows, cols);
  if (amx && !(amx_available() && amx_supported(w.m))) {
    st.SkipWithError("no AMX on this CPU");
    return;
  }
  if (q8 && !amx && !packed_q8_supported(w.m)) {
    st.SkipWithError("no int8 kernel for this format on this CPU");
    return;
  }
  std::vector<uint8_t> lanes;  // q8 = 4: the codes prepacked for the lanes kernel
  if (st.range(4) == 4) {
    lanes = pack_lanes(w.m);
    if (lanes.empty()) {
      st.SkipWithError("no lanes kernel for this format on this CPU");
      return;
    }
    use_lanes(w.m, lanes);
  }
  std::vector<float> x = make_x(n, cols), y(static_cast<size_t>(n * rows));
  ActQ8 xq;
  ActTiles xt;
  for (auto _ : st) {
    if (amx) {
      act_tiles_init(n, cols, &xt);
      quantize_act_tiles(x.data(), 0, n, &xt);
      packed_matmul_amx(w.m, xt, y.data(), rows, 0, rows);
    } else if (q8) {
      quantize_act_q8(x.data(), n, cols, &xq);
      packed_matmul_q8(w.m, xq, y.data(), rows, 0, rows, true,
                       st.range(4) == 3 ? BatchKernel::kTiles : BatchKernel::kAuto);
    } else {
      packed_matmul(w.m, x.data(), n, y.data(), rows, 0, rows);
    }
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * w.m.bytes()));
  st.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(rows * cols * n) * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(packed_kernel_isa());
}

void MatmulArgs(benchmark::internal::Benchmark* b) {
  for (int bits : {2, 3, 4, 5, 6, 8, 16, kMxfp4, kNvfp4, kMxfp8})
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{1536, 576}, {576, 1536}, {1024, 2048}, {8192, 2048}})
      for (int64_t n : {1, 64, 256})
        for (int q8 : {0, 1, 2})
          if (!(q8 && bits == 16) && !(q8 == 2 && n == 1) && !(n == 256 && q8 != 2))
            b->Args({bits, rows, cols, n, q8});
  // A few tokens on the per-token kernels (what a speculative check of k + 1 positions costs) and
  // on the batch kernels (q8 = 3: a batch-invariant server's rows; 4: with the codes prepacked).
  for (int bits : {4, 8})
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{1536, 576}, {576, 1536}, {1024, 2048}, {8192, 2048}})
      for (int64_t n : {1, 2, 4, 8, 64})
        for (int q8 : {0, 1, 3, 4})
          if ((n > 1 || q8 >= 3) && (n < 64 || q8 == 4) && (bits == 4 || q8 != 4))
            b->Args({bits, rows, cols, n, q8});
}
BENCHMARK(BM_Matmul)->Apply(MatmulArgs)->ArgNames({"bits", "rows", "cols", "n", "q8"});

// Decode attention of one GQA group (3 query heads, SmolLM2) over a cache of `len` positions.
// args: positions, head_dim, f16 (0/1)
void BM_AttendDecode(benchmark::State& st) {
  const int64_t len = st.range(0), hd = st.range(1), g = 3, ks = (len + 15) / 16 * 16, vld = 3 * hd;
  const bool f16 = st.range(2) != 0;
  std::vector<float> q = make_x(g, hd), kt = make_x(hd, ks), v = make_x(len, vld);
  std::vector<uint16_t> kt16(kt.size()), v16(v.size());
  f32_to_f16_n(kt.data(), static_cast<int64_t>(kt.size()), kt16.data());
  f32_to_f16_n(v.data(), static_cast<int64_t>(v.size()), v16.data());
  std::vector<float> scores(static_cast<size_t>(g * (len + 16))), m(g), l(g), acc(g * hd);
  for (auto _ : st) {
    if (f16)
      attend_partial(q.data(), g, hd, kt16.data(), v16.data(), vld, 0, len, 0.125f, scores.data(),
                     m.data(), l.data(), acc.data());
    else
      attend_partial(q.data(), g, hd, kt.data(), v.data(), vld, 0, len, 0.125f, scores.data(),
                     m.data(), l.data(), acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  st.SetItemsProcessed(st.iterations() * len * g);
}
// Prefill attention of one token of a GQA group of 3 heads (SmolLM2) over `len` positions of an
// f16 cache: args len, rows per call (1: each head alone; 3: the group together).
void BM_AttendRows(benchmark::State& st) {
  const int64_t len = st.range(0), per = st.range(1), hd = 64, g = 3, ks = (len + 15) / 16 * 16;
  const int64_t vld = 3 * hd;
  std::vector<float> q = make_x(g, hd), kt = make_x(hd, ks), v = make_x(len, vld);
  std::vector<uint16_t> kt16(kt.size()), v16(v.size());
  f32_to_f16_n(kt.data(), static_cast<int64_t>(kt.size()), kt16.data());
  f32_to_f16_n(v.data(), static_cast<int64_t>(v.size()), v16.data());
  std::vector<float> scores(static_cast<size_t>(4 * (len + 24))), out(static_cast<size_t>(g * hd));
  const int64_t lens[4] = {len, len, len, len};
  for (auto _ : st) {
    for (int64_t i = 0; i < g; i += per)
      attend_rows(q.data() + i * hd, per, hd, lens, kt16.data(), v16.data(), vld, hd, 0.125f,
                  scores.data(), out.data() + i * hd, hd);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * g * len);
}
BENCHMARK(BM_AttendRows)->ArgNames({"len", "rows"})->Args({3000, 1})->Args({3000, 3});

// The same token over a whole model's caches, as a server step meets them: `layers` layers of 3
// KV heads (SmolLM2: 30, 3 MB a layer at 4000 positions), each read once an iteration, so the
// keys and values come from the last-level cache or memory, not from L2.
void BM_AttendRowsCold(benchmark::State& st) {
  const int64_t len = st.range(0), layers = st.range(1), hd = 64, g = 3, n_kv = 3;
  const int64_t ks = (len + 15) / 16 * 16, vld = n_kv * hd;
  const std::vector<float> q = make_x(n_kv * g, hd);
  std::vector<std::vector<uint16_t>> kt(static_cast<size_t>(layers)), v(kt.size());
  for (int64_t l = 0; l < layers; ++l) {
    const std::vector<float> k32 = make_x(n_kv * hd, ks), v32 = make_x(len, vld);
    kt[l].resize(k32.size()), v[l].resize(v32.size());
    f32_to_f16_n(k32.data(), static_cast<int64_t>(k32.size()), kt[l].data());
    f32_to_f16_n(v32.data(), static_cast<int64_t>(v32.size()), v[l].data());
  }
  std::vector<float> scores(static_cast<size_t>(4 * (len + 24))), out(static_cast<size_t>(g * hd));
  const int64_t lens[4] = {len, len, len, len};
  for (auto _ : st) {
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t h = 0; h < n_kv; ++h)
        attend_rows(q.data() + h * g * hd, g, hd, lens, kt[l].data() + h * hd * ks,
                    v[l].data() + h * hd, vld, hd, 0.125f, scores.data(), out.data(), hd);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * layers * n_kv * g * len);
  st.SetBytesProcessed(st.iterations() * layers * 2 * len * vld * 2);
}
BENCHMARK(BM_AttendRowsCold)->ArgNames({"len", "layers"})->Args({4000, 1})->Args({4000, 30});

BENCHMARK(BM_AttendDecode)
    ->Args({128, 64, 0})
    ->Args({128, 64, 1})
    ->Args({2048, 64, 0})
    ->Args({2048, 64, 1})
    ->ArgNames({"len", "hd", "f16"});

// One Gated DeltaNet layer's recurrence (qwen3_5) over a prefill of `len` tokens: 16 key and
// 16 value heads of 128 (a Qwen3.5-0.8B-like layer), token by token (chunk 0) or in chunks
// (the WY form). q/k normalization included; the conv and the projections are not.
// args: tokens, chunk
void BM_GatedDelta(benchmark::State& st) {
  const int64_t len = st.range(0), chunk = st.range(1);
  const GatedDeltaDims d{16, 16, 128, 128};
  const std::vector<float> qkv0 = make_x(len, d.conv_dim()), b = make_x(len, d.hv),
                           a = make_x(len, d.hv), a_log = make_x(1, d.hv), dt = make_x(1, d.hv);
  std::vector<float> qkv, state(static_cast<size_t>(d.state_size())),
      y(static_cast<size_t>(len * d.value_dim()));
  for (auto _ : st) {
    st.PauseTiming();
    qkv = qkv0;
    std::fill(state.begin(), state.end(), 0.0f);
    st.ResumeTiming();
    gated_delta_rule(d, qkv.data(), b.data(), a.data(), a_log.data(), dt.data(), state.data(), len,
                     y.data(), chunk);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(st.iterations() * len);
}
BENCHMARK(BM_GatedDelta)
    ->Args({2048, 0})
    ->Args({2048, 32})
    ->Args({2048, 64})
    ->Args({2048, 128})
    ->Args({1, 0})
    ->ArgNames({"tokens", "chunk"})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tq

// TQ_BENCH_TARGET=AVX2 (or AVX3, AVX3_DL, ...): run the kernels compiled for that Highway target
// instead of the best one this CPU supports, to measure the paths of older CPUs here.
int main(int argc, char** argv) {
  if (const char* want = std::getenv("TQ_BENCH_TARGET")) {
    bool found = false;
    for (int64_t t : hwy::SupportedAndGeneratedTargets())
      if (std::string_view(hwy::TargetName(t)) == want)
        hwy::SetSupportedTargetsForTest(t), found = true;
    if (!found) {
      std::fprintf(stderr, "TQ_BENCH_TARGET=%s: not a target this CPU runs\n", want);
      return 2;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
