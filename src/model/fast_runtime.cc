// The fast runtime: the decoder layer of model/layer.h with the weight matrices used as the
// checkpoint stores them (MLX packed codes or f32/f16/bf16, memory-mapped, never dequantized at
// load), the packed SIMD kernels, products split by output rows over a thread pool, and decode
// attention over the KV cache per head into reused scratch.
#include "model/runtime.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <span>
#include <type_traits>
#include <utility>

#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>

#include "base/thread_pool.h"
#include "io/checkpoint_dir.h"
#include "kernels/amx_matmul.h"
#include "kernels/attention.h"
#include "kernels/cpu_info.h"
#include "kernels/gated_delta.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/packed_matmul.h"
#include "kernels/vec_ops.h"
#include "model/kv_blocks.h"
#include "model/layer.h"
#include "model/mtp.h"
#include "model/read_ahead.h"
#include "model/rope.h"
#include "model/tensor_table.h"

namespace tq {

namespace {

using FastLayer = LayerTensors<PackedMatrix>;

// One product of a fused batch: y[t * ldy + r] = x[t] · W[r] (+ bias[r]).
struct MatJob {
  const PackedMatrix* w;
  float* y;
  int64_t ldy;
  const std::vector<float>* bias;
};

// From this many tokens on, products go through decoded strips and OpenBLAS (f32 activations),
// or with --activations auto from kAutoBlasMinTokens on where the integer register tiles do not
// run: below it the per-token integer kernels, which read each weight once per call, beat
// decoding whole matrices to f32. The tiles beat OpenBLAS at every length.
constexpr int64_t kBlasMinTokens = 16;
constexpr int64_t kAutoBlasMinTokens = 48;
// On CPUs with AMX, int8 products of this many tokens and more go through the tile kernel.
constexpr int64_t kAmxMinTokens = 16;
// From this many tokens on (and for prefill steps at any count), attention runs in blocks of
// queries over transposed keys.
constexpr int64_t kBlockAttnMinTokens = 2;

// Positions a layer's keys have room for per KV head: whole blocks of 16.
int64_t kv_stride(int64_t capacity) { return (capacity + 15) / 16 * 16; }

// Index of key (row r = g * hd + d of the layer's kvd, position j) in a layer's keys: KV head g's
// hd * ks elements, in blocks of 16 positions transposed within (kernels/vec_ops.h).
int64_t key_index(int64_t hd, int64_t ks, int64_t r, int64_t j) {
  return r / hd * hd * ks + (j >> 4) * hd * 16 + r % hd * 16 + (j & 15);
}

// Cache elements from f32 and back (f16 as bits).
void to_kv(const float* x, int64_t n, float* out) { std::copy(x, x + n, out); }
void to_kv(const float* x, int64_t n, uint16_t* out) { f32_to_f16_n(x, n, out); }
void from_kv(const float* x, int64_t n, float* out) { std::copy(x, x + n, out); }
void from_kv(const uint16_t* x, int64_t n, float* out) { f16_to_f32_n(x, n, out); }

void add_into(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// What one forward call's stages read and write (the fast step's io of run_layer).
struct FastIo {
  int64_t l = 0, n = 0;  // layer; rows of all sequences
  // Rows on the per-token kernels, which come first: per_token sequences, and with
  // batch_invariant the one-token ones that are not prefill.
  int64_t split = 0;
  std::span<const SeqStep> seqs;
  std::vector<int64_t> first;  // row of each sequence's first token
  float *x, *h, *q, *k, *v, *att, *gate, *up;
  const float *cos, *sin;
  // qwen3_5 (as F32Io): q_proj's [query | gate] rows and the gate; the DeltaNet in_proj outputs.
  float *qg = nullptr, *att_gate = nullptr;
  float *lin_qkv = nullptr, *lin_z = nullptr, *lin_b = nullptr, *lin_a = nullptr;
  bool mtp = false;  // the MTP head's layer (l = num_hidden_layers): nothing to read ahead
};

}  // namespace

class FastRuntime final : public Runtime {
 public:
  Status forward(std::span<const SeqStep> seqs) const override;
  KvCache new_cache(int64_t capacity) const override;
  bool fits(const KvCache& cache) const override;
  std::string name() const override;
  uint64_t bytes_per_token() const override;
  int threads() const override { return pool->size(); }
  bool has_mtp() const override { return mtp_src != nullptr; }
  KvCache new_mtp_cache(int64_t capacity) const override;
  bool fits_mtp(const KvCache& cache) const override;
  Status mtp_forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                     KvCache& cache, std::span<float> logits) const override;
  Status load_mtp(const ModelSource& src);

  ModelConfig cfg;
  RuntimeOptions opts;
  std::vector<double> inv_freq;
  std::unique_ptr<DirTensorSource> dir;          // the mapped files the matrices point into
  std::deque<std::vector<float>> owned;          // f32 matrices that could not be used in place
  std::deque<MlxQuantBytes> owned_quant;         // GGUF blocks re-encoded as MLX quantizations
  std::deque<std::vector<uint8_t>> owned_lanes;  // codes prepacked (RuntimeOptions::prepack)
  ModelTensors<PackedMatrix> t;
  // qwen3_5's MTP head (RuntimeOptions::mtp): its mapped files and tensors; its layer runs
  // as layer num_hidden_layers, slot 0 of its own cache.
  std::unique_ptr<TensorSource> mtp_src;
  MtpTensors<PackedMatrix> mtp;
  // Decode's products in order (per layer: q/k/v, o, gate/up, down; then the head) and what
  // reads their rows ahead while pool threads wait. Declared before the pool: its threads
  // call read_ahead until the pool is destroyed.
  std::vector<ProductRows> products;
  std::unique_ptr<ReadAhead> read_ahead;
  std::unique_ptr<ThreadPool> pool;
  // Row slices per thread of a decode product: 4 when the weights fit the last-level cache (a
  // thread that starts late hands work to the other), else 1 (weights stream from DRAM, best as
  // one contiguous range per thread).
  int slices_per_thread = 1;
  // Rows the int8 products split at: the lanes' strips where codes are prepacked.
  int64_t q8_align = 8;

  // Scratch reused across calls (forward is one call at a time: the mutex).
  mutable std::mutex mu;
  mutable std::vector<float> x, h, q, att, gate, up, cos, sin, knew, vnew, kf, vf, logits_all;
  mutable std::vector<float> part_ml, part_acc;  // decode attention's partial softmaxes
  mutable std::vector<float> qg, att_gate, lin_qkv, lin_z, lin_b, lin_a;  // qwen3_5
  mutable std::vector<float> mtp_in;  // the MTP fc's input [n, 2d]
  // A layer's index among the layers of its kind (qwen3_5: the cache holds keys and values
  // for full-attention layers only, states for DeltaNet layers); n_full / n_linear of each.
  std::vector<int64_t> slot;
  int64_t n_full = 0, n_linear = 0;
  int64_t delta_chunk = 32;  // delta_chunk_from_env
  mutable ActQ8 xq, xq2;
  mutable ActTiles xt;

  Result<PackedMatrix> matrix(const TensorSource& ts, const TensorSpec& s);
  // Points io at the scratch for n rows, of which out_rows get logits.
  void bind(FastIo& io, int64_t n, int64_t out_rows) const;
  Status vec(const TensorSource& ts, const TensorSpec& s, std::vector<float>* out);
  // The stages of model/layer.h run_layer, and RMSNorm over the pool.
  void norm(const float* in, const std::vector<float>& w, int64_t rows, int64_t dim,
            float* out) const;
  void ahead(const FastIo& io, size_t product) const;
  void attn_norm(const FastLayer& L, FastIo& io) const;
  void qkv(const FastLayer& L, FastIo& io) const;
  void attn_core(const FastLayer& L, FastIo& io) const;
  void attn_out(const FastLayer& L, FastIo& io) const;
  void mlp_norm(const FastLayer& L, FastIo& io) const;
  void mlp_act(const FastLayer& L, FastIo& io) const;
  void mlp_out(const FastLayer& L, FastIo& io) const;
  // The Gated DeltaNet halves of qkv / attn_core / attn_out (L.linear).
  void lin_in(const FastLayer& L, FastIo& io) const;
  void lin_core(const FastLayer& L, FastIo& io) const;
  void lin_out(const FastLayer& L, FastIo& io) const;
  int64_t conv_size() const { return (cfg.linear_conv_kernel_dim - 1) * cfg.linear_conv_dim(); }
  int64_t ssm_size() const {
    return cfg.linear_num_value_heads * cfg.linear_value_head_dim * cfg.linear_key_head_dim;
  }
  // Rows [0, split) take the per-token kernels (FastIo::split); [split, n) the batch kernels
  // with batch_invariant, else the kernels their count picks.
  void run(std::initializer_list<MatJob> jobs, const float* xin, int64_t n,
           int64_t split = 0) const;
  void run_blas(std::initializer_list<MatJob> jobs, const float* xin, int64_t n) const;
  // How products of n tokens with these matrices run (run() and the attention choice agree).
  enum class Path { kAmx, kBlas, kKernels };
  Path path(std::span<const PackedMatrix* const> ws, int64_t n) const;
  // Appends the n new tokens' keys and values (kn, vn) to one layer's cache (kt, vc: f32 or
  // f16 bits) at p0, then att[n, qd] = causal attention of q[n, qd] over it.
  template <typename T>
  void attention(T* kt, T* vc, int64_t ks, const float* kn, const float* vn, const float* q,
                 int64_t n, int64_t p0, bool blas, bool prefill, float* att) const;
  // Every product's matrix whose codes the lanes kernel takes gets them prepacked; the mapped
  // originals' pages are handed back (the f32 path and embedding rows fault them in again).
  // only_bits > 0: only the affine matrices of that width.
  void prepack_products(int only_bits = 0);
  template <typename F>
  void split_rows(std::initializer_list<MatJob> jobs, int64_t n, int64_t align, int per_thread,
                  F&& product) const;
  mutable std::vector<float> dense;  // a strip of rows decoded for the prefill GEMM
};

void FastRuntime::prepack_products(int only_bits) {
  // Re-encoded GGUF codes are freed once prepacked where nothing can read them again: path()
  // never picks AMX or OpenBLAS (which read the originals; OpenBLAS takes a whole job, so one
  // float matrix beside a prepacked one in q/k/v would send it there), and with rows in whole
  // strips no range starts inside one (which would unpack the originals). Mapped files' pages
  // are released instead.
  bool whole_strips = true, all_tiles = true;
  for (const ProductRows& p : products)
    for (int j = 0; j < p.count; ++j) {
      const PackedMatrix& w = *p.w[static_cast<size_t>(j)];
      whole_strips &= w.rows % 32 == 0;
      all_tiles &= packed_q8_tiles_supported(w);
    }
  const ActPath act = opts.activations;
  const bool lanes_only =
      opts.batch_invariant ||
      (!(opts.amx && amx_available()) &&
       (act == ActPath::kInt8 || (act == ActPath::kAuto && opts.tiles && all_tiles)));
  const bool free_owned = lanes_only && whole_strips;
  for (const ProductRows& p : products)
    for (int j = 0; j < p.count; ++j) {
      auto& w = const_cast<PackedMatrix&>(*p.w[static_cast<size_t>(j)]);
      if (only_bits > 0 && (w.format != WeightFormat::kAffine || w.bits != only_bits)) continue;
      std::vector<uint8_t> lanes = pack_lanes(w);
      if (lanes.empty()) continue;
      use_lanes(w, owned_lanes.emplace_back(std::move(lanes)));
      q8_align = 32;
      if (w.data == t.embed.data) continue;
      if (dir == nullptr) {
        if (!free_owned) continue;
        for (MlxQuantBytes& o : owned_quant)
          if (o.weight.data() == w.data) {
            std::vector<uint8_t>().swap(o.weight);
            w.data = nullptr;  // a read now faults at once instead of computing from freed bytes
            break;
          }
        continue;
      }
      const std::span<const uint8_t> codes(w.data, static_cast<size_t>(w.rows * w.row_bytes()));
      for (const auto& f : dir->files()) f.release(codes);
    }
}

Result<PackedMatrix> FastRuntime::matrix(const TensorSource& ts, const TensorSpec& s) {
  const TensorInfo* ti = ts.find(s.name);
  if (ti == nullptr) return err("{}: no tensor '{}'", ts.path(), s.name);
  if (ti->shape != s.shape || s.shape.size() != 2)
    return err("{}: tensor '{}' has shape {}, the config implies {}", ts.path(), s.name,
               shape_str(ti->shape), shape_str(s.shape));
  const int64_t rows = s.shape[0], cols = s.shape[1];
  if (const auto* dir = dynamic_cast<const DirTensorSource*>(&ts)) {
    size_t fw = 0, fs = 0, fb = 0;
    const SafetensorsEntry* we = dir->stored(s.name, &fw);
    const auto& files = dir->files();
    if (we != nullptr && ti->mlx_quant) {
      const std::string p = s.name.substr(0, s.name.size() - 7);  // drop ".weight"
      const SafetensorsEntry* se = dir->stored(p + ".scales", &fs);
      const SafetensorsEntry* be = dir->stored(p + ".biases", &fb);
      if (se == nullptr) return err("{}: no '{}.scales'", ts.path(), p);
      std::span<const uint8_t> biases;
      if (be != nullptr) biases = files[fb].data(*be);
      auto m = make_quant_matrix(*ti->mlx_quant, rows, cols, files[fw].data(*we), se->dtype,
                                 files[fs].data(*se), biases);
      if (!m.ok()) return err("{}: tensor '{}': {}", ts.path(), s.name, m.error().message);
      return m;
    }
    if (we != nullptr &&
        (we->dtype == DType::kF32 || we->dtype == DType::kF16 || we->dtype == DType::kBF16)) {
      auto m = make_float_matrix(we->dtype, rows, cols, files[fw].data(*we));
      if (!m.ok()) return err("{}: tensor '{}': {}", ts.path(), s.name, m.error().message);
      return m;
    }
  }
  // GGUF blocks that are exactly an MLX quantization stay packed (re-encoded once).
  TQ_TRY(std::optional<MlxQuantBytes> q, ts.load_mlx_quant(s.name));
  if (q) {
    const MlxQuantBytes& o = owned_quant.emplace_back(std::move(*q));
    auto m = make_quant_matrix(o.spec, rows, cols, o.weight, o.scale_dtype, o.scales, o.biases);
    if (!m.ok()) return err("{}: tensor '{}': {}", ts.path(), s.name, m.error().message);
    return m;
  }
  // Other storage: decoded once to f32 (as the reference runtime does).
  TQ_TRY(FloatTensor f, ts.load_f32_compute(s.name));
  owned.push_back(std::move(f.data));
  const auto& v = owned.back();
  return make_float_matrix(DType::kF32, rows, cols,
                           {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)});
}

Status FastRuntime::vec(const TensorSource& ts, const TensorSpec& s, std::vector<float>* out) {
  TQ_TRY(FloatTensor f, ts.load_f32(s.name));
  if (f.shape != s.shape)
    return err("{}: tensor '{}' has shape {}, the config implies {}", ts.path(), s.name,
               shape_str(f.shape), shape_str(s.shape));
  *out = std::move(f.data);
  return ok_status();
}

FastRuntime::Path FastRuntime::path(std::span<const PackedMatrix* const> ws, int64_t n) const {
  const ActPath act = opts.activations;
  if (opts.batch_invariant) return Path::kKernels;
  if (act != ActPath::kF32 && n >= kAmxMinTokens && opts.amx && amx_available() &&
      std::all_of(ws.begin(), ws.end(), [](const PackedMatrix* w) { return amx_supported(*w); }))
    return Path::kAmx;
  // Matrices the integer register tiles take stay on them at every batch size with auto
  // (RuntimeOptions::tiles off sends their prefills to OpenBLAS, for A/B runs).
  if (act == ActPath::kAuto && opts.tiles &&
      std::all_of(ws.begin(), ws.end(),
                  [](const PackedMatrix* w) { return packed_q8_tiles_supported(*w); }))
    return Path::kKernels;
  if (act == ActPath::kF32 ? n >= kBlasMinTokens : act == ActPath::kAuto && n >= kAutoBlasMinTokens)
    return Path::kBlas;
  return Path::kKernels;
}

// The products in `jobs` share the input x[n, cols]; their output rows are concatenated and
// split over the pool in one pass (slice bounds multiples of `align`); product(job, lo, hi)
// fills rows [lo, hi) of one job, then its bias is added.
template <typename F>
void FastRuntime::split_rows(std::initializer_list<MatJob> jobs, int64_t n, int64_t align,
                             int per_thread, F&& product) const {
  int64_t total = 0;
  for (const MatJob& j : jobs) total += j.w->rows;
  pool->parallel_for(
      total,
      [&](int64_t b, int64_t e) {
        int64_t off = 0;
        for (const MatJob& j : jobs) {
          const int64_t lo = std::max(b, off) - off, hi = std::min(e, off + j.w->rows) - off;
          off += j.w->rows;
          if (lo >= hi) continue;
          product(j, lo, hi);
          if (j.bias != nullptr && !j.bias->empty())
            for (int64_t t = 0; t < n; ++t)
              for (int64_t r = lo; r < hi; ++r) j.y[t * j.ldy + r] += (*j.bias)[r];
        }
      },
      align, per_thread);
}

void FastRuntime::run(std::initializer_list<MatJob> jobs, const float* xin, int64_t n,
                      int64_t split) const {
  std::vector<const PackedMatrix*> ws;
  for (const MatJob& j : jobs) ws.push_back(j.w);
  const Path p = split > 0 ? Path::kKernels : path(ws, n);
  if (p == Path::kBlas) return run_blas(jobs, xin, n);
  if (p == Path::kAmx) {
    // x quantized to tiles by token ranges, then rows split in multiples of the tile height.
    act_tiles_init(n, jobs.begin()->w->cols, &xt);
    pool->parallel_for(
        n, [&](int64_t b, int64_t e) { quantize_act_tiles(xin, b, e, &xt); }, 16);
    // Four slices per thread whatever the model: prefill is compute-bound, and one slice per
    // thread left the other waiting on a late one.
    split_rows(jobs, n, 16, 4, [&](const MatJob& j, int64_t lo, int64_t hi) {
      packed_matmul_amx(*j.w, xt, j.y, j.ldy, lo, hi);
    });
    return;
  }
  bool q8 = false;
  if (opts.activations != ActPath::kF32)
    for (const MatJob& j : jobs) q8 |= packed_q8_supported(*j.w);
  // Two groups of rows, each with its kernel choice: [0, split) per token, the others by their
  // count, or with batch_invariant on the batch kernels.
  const bool inv = opts.batch_invariant;
  // Prepacked codes give every row the lanes' bits whatever the choice: one group, so each
  // strip is read once for decode rows and prefill tokens together.
  const bool lanes = q8 && std::all_of(jobs.begin(), jobs.end(),
                                       [](const MatJob& j) { return j.w->lanes != nullptr; });
  const int64_t cols = jobs.begin()->w->cols, s = lanes ? 0 : split, rest = n - s;
  const BatchKernel first = BatchKernel::kPerToken;
  const BatchKernel second = inv ? BatchKernel::kTiles : BatchKernel::kAuto;
  if (q8 && s > 0) quantize_act_q8(xin, s, cols, &xq2);
  if (q8 && rest > 0) {
    // A prefill's tokens quantized over the pool: on one thread the others waited for it.
    act_q8_init(rest, cols, &xq);
    const float* xr = xin + s * cols;
    bool nib = false;  // the 4-bit codes' order of x, for the per-token kernels only
    for (const MatJob& j : jobs) nib |= packed_q8_reads_nibbles(*j.w, rest, second);
    if (rest >= 8)
      pool->parallel_for(rest,
                         [&](int64_t b, int64_t e) { quantize_act_q8_tokens(xr, b, e, &xq, nib); });
    else
      quantize_act_q8_tokens(xr, 0, rest, &xq, nib);
  }
  // The int8 kernels read each slice's rows from several parts of it at once for every model,
  // not only those larger than the last-level cache: a shared LLC holds less than it says.
  split_rows(jobs, n, q8_align, slices_per_thread, [&](const MatJob& j, int64_t lo, int64_t hi) {
    const bool int8 = q8 && packed_q8_supported(*j.w);
    float* y2 = j.y + s * j.ldy;
    if (s > 0) {
      if (int8)
        packed_matmul_q8(*j.w, xq2, j.y, j.ldy, lo, hi, true, first);
      else
        packed_matmul(*j.w, xin, s, j.y, j.ldy, lo, hi, first);
    }
    if (rest > 0) {
      if (int8)
        packed_matmul_q8(*j.w, xq, y2, j.ldy, lo, hi, true, second);
      else
        packed_matmul(*j.w, xin + s * cols, rest, y2, j.ldy, lo, hi, second);
    }
  });
}

// Prefill: strips of rows decoded to f32, then one OpenBLAS GEMM per strip (its
// own threads), so long prompts run at dense-GEMM speed while the weights stay packed.
void FastRuntime::run_blas(std::initializer_list<MatJob> jobs, const float* xin, int64_t n) const {
  for (const MatJob& j : jobs) {
    const int64_t cols = j.w->cols;
    const int64_t strip = std::clamp<int64_t>((8 << 20) / (cols * 4), 16, 512);
    if (static_cast<int64_t>(dense.size()) < strip * cols)
      dense.resize(static_cast<size_t>(strip * cols));
    for (int64_t r0 = 0; r0 < j.w->rows; r0 += strip) {
      const int64_t rows = std::min(strip, j.w->rows - r0);
      // Decoded on this thread: pool workers spinning beside OpenBLAS's threads would slow both.
      for (int64_t i = 0; i < rows; ++i) packed_decode_row(*j.w, r0 + i, dense.data() + i * cols);
      // y[:, r0:r0+rows] = x[n, cols] · dense[rows, cols]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                  static_cast<int>(rows), static_cast<int>(cols), 1.0f, xin, static_cast<int>(cols),
                  dense.data(), static_cast<int>(cols), 0.0f, j.y + r0, static_cast<int>(j.ldy));
    }
    if (j.bias != nullptr && !j.bias->empty())
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < j.w->rows; ++r) j.y[t * j.ldy + r] += (*j.bias)[r];
  }
}

template <typename T>
void FastRuntime::attention(T* kt, T* vc, int64_t ks, const float* kn, const float* vn,
                            const float* q, int64_t n, int64_t p0, bool blas, bool prefill,
                            float* att) const {
  const int64_t hd = cfg.head_dim, n_heads = cfg.num_attention_heads,
                n_kv = cfg.num_key_value_heads, qd = n_heads * hd, kvd = n_kv * hd,
                group = n_heads / n_kv, total = p0 + n;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // Values append as rows; keys are converted once, then scattered to their transposed places.
  to_kv(vn, n * kvd, vc + p0 * kvd);
  thread_local std::vector<T> kcvt;
  if (static_cast<int64_t>(kcvt.size()) < n * kvd) kcvt.resize(static_cast<size_t>(n * kvd));
  to_kv(kn, n * kvd, kcvt.data());
  for (int64_t r = 0; r < kvd; ++r)
    for (int64_t i = 0; i < n; ++i) kt[key_index(hd, ks, r, p0 + i)] = kcvt[i * kvd + r];

  if (n < kBlockAttnMinTokens && !prefill) {
    // Decode: tasks of (token, KV head, position range) over the pool, each the partial
    // softmax of the heads sharing that KV head (keys and values read once for all of them);
    // ranges are multiples of 16 positions, as many as keep both threads busy.
    const int64_t threads = pool->size(), units = n * n_kv;
    int64_t parts = std::max<int64_t>(1, (2 * threads + units - 1) / units);
    while ((units * parts) % threads != 0) ++parts;
    parts = std::clamp<int64_t>(parts, 1, (total + 63) / 64);
    const int64_t chunk = ((total + parts - 1) / parts + 15) / 16 * 16;
    parts = (total + chunk - 1) / chunk;
    const int64_t slots = units * parts * group;
    if (static_cast<int64_t>(part_ml.size()) < 2 * slots)
      part_ml.resize(static_cast<size_t>(2 * slots));
    if (static_cast<int64_t>(part_acc.size()) < slots * hd)
      part_acc.resize(static_cast<size_t>(slots * hd));
    float *pm = part_ml.data(), *pl = pm + slots, *pacc = part_acc.data();
    pool->parallel_for(units * parts, [&](int64_t b, int64_t e) {
      thread_local std::vector<float> scores;
      if (static_cast<int64_t>(scores.size()) < group * (chunk + 16))
        scores.resize(static_cast<size_t>(group * (chunk + 16)));
      for (int64_t idx = b; idx < e; ++idx) {
        const int64_t i = idx / (n_kv * parts), g = idx / parts % n_kv, c = idx % parts;
        const int64_t len = p0 + i + 1, j0 = c * chunk, s = idx * group;
        if (j0 >= len) {  // past this token's positions: weighs nothing
          for (int64_t k = 0; k < group; ++k) pm[s + k] = 0.0f, pl[s + k] = 0.0f;
          continue;
        }
        attend_partial(q + i * qd + g * group * hd, group, hd, kt + g * hd * ks, vc + g * hd, kvd,
                       j0, std::min(len, j0 + chunk), scale, scores.data(), pm + s, pl + s,
                       pacc + s * hd);
      }
    });
    // Merge the ranges: out = Σ_c e^(m_c - M) acc_c / Σ_c e^(m_c - M) l_c.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t hh = 0; hh < n_heads; ++hh) {
        const int64_t g = hh / group, k = hh % group, s0 = (i * n_kv + g) * parts * group + k;
        const int64_t valid = std::min(parts, (p0 + i + chunk) / chunk);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < valid; ++c) mx = std::max(mx, pm[s0 + c * group]);
        float den = 0.0f;
        float* out = att + i * qd + hh * hd;
        std::fill(out, out + hd, 0.0f);
        for (int64_t c = 0; c < valid; ++c) {
          const int64_t s = s0 + c * group;
          const float w = std::exp(pm[s] - mx);
          den += w * pl[s];
          const float* a = pacc + s * hd;
          for (int64_t dd = 0; dd < hd; ++dd) out[dd] += w * a[dd];
        }
        const float inv = 1.0f / den;
        for (int64_t dd = 0; dd < hd; ++dd) out[dd] *= inv;
      }
    return;
  }
  if (blas) {
    // OpenBLAS attention on row-major f32 copies of this layer's keys and values.
    if (static_cast<int64_t>(kf.size()) < total * kvd) kf.resize(static_cast<size_t>(total * kvd));
    if (static_cast<int64_t>(vf.size()) < total * kvd && !std::is_same_v<T, float>)
      vf.resize(static_cast<size_t>(total * kvd));
    std::vector<float> blk(static_cast<size_t>(hd * 16));
    for (int64_t g = 0; g < n_kv; ++g)
      for (int64_t j0 = 0; j0 < total; j0 += 16) {  // one block of 16 positions at a time
        from_kv(kt + key_index(hd, ks, g * hd, j0), hd * 16, blk.data());
        for (int64_t j = j0; j < std::min(total, j0 + 16); ++j)
          for (int64_t dd = 0; dd < hd; ++dd) kf[j * kvd + g * hd + dd] = blk[dd * 16 + j - j0];
      }
    const float* vrows = vf.data();  // an f32 cache's values are rows already
    if constexpr (std::is_same_v<T, float>)
      vrows = vc;
    else
      from_kv(vc, total * kvd, vf.data());
    causal_attention(q, kf.data(), vrows, n, p0, n_heads, n_kv, hd, scale, att);
    return;
  }
  // Prefill: the rows (token, head) of a block of 8 tokens that share a KV head go in passes
  // of up to 4 rows, one pass per task, so keys and values are read once per 4 rows whatever
  // the chunk's length (a row's bits do not depend on its pass). Block p is paired with the
  // last-but-p so that contiguous slices carry equal causal work; four slices per thread even
  // out a slow one.
  const int64_t nblk = (n + 7) / 8, max_passes = (8 * group + 3) / 4;
  pool->parallel_for(
      (nblk + 1) / 2 * n_kv * max_passes,
      [&](int64_t b, int64_t e) {
        thread_local std::vector<float> scores, rows;
        if (static_cast<int64_t>(scores.size()) < 4 * (total + 24))
          scores.resize(static_cast<size_t>(4 * (total + 24)));
        if (static_cast<int64_t>(rows.size()) < 8 * hd) rows.resize(static_cast<size_t>(8 * hd));
        float *qr = rows.data(), *out = qr + 4 * hd;
        for (int64_t idx = b; idx < e; ++idx) {
          const int64_t p = idx / (n_kv * max_passes), g = idx / max_passes % n_kv,
                        r = idx % max_passes;
          for (const int64_t blk : {p, nblk - 1 - p}) {
            const int64_t i0 = blk * 8, nr = std::min<int64_t>(8, n - i0) * group;
            const int64_t passes = (nr + 3) / 4, base = nr / passes, extra = nr % passes;
            if (r < passes) {  // rows [r0, r0 + m) in (token, head) order, even pass sizes
              const int64_t m = base + (r < extra ? 1 : 0), r0 = r * base + std::min(r, extra);
              int64_t len[4];
              for (int64_t j = 0; j < m; ++j) {
                const int64_t t = i0 + (r0 + j) / group, hh = g * group + (r0 + j) % group;
                std::copy_n(q + t * qd + hh * hd, hd, qr + j * hd);
                len[j] = p0 + t + 1;
              }
              attend_rows(qr, m, hd, len, kt + g * hd * ks, vc + g * hd, kvd, hd, scale,
                          scores.data(), out, hd);
              for (int64_t j = 0; j < m; ++j) {
                const int64_t t = i0 + (r0 + j) / group, hh = g * group + (r0 + j) % group;
                std::copy_n(out + j * hd, hd, att + t * qd + hh * hd);
              }
            }
            if (blk == nblk - 1 - p) break;
          }
        }
      },
      1, 4);
}

Result<std::unique_ptr<Runtime>> load_fast_runtime(const ModelSource& src,
                                                   const RuntimeOptions& opts,
                                                   std::vector<double> inv_freq,
                                                   LoadProgress progress) {
  std::unique_ptr<FastRuntime> fm(new FastRuntime());
  FastRuntime& m = *fm;
  m.cfg = src.config;
  for (int64_t l = 0; l < m.cfg.num_hidden_layers; ++l)
    m.slot.push_back(m.cfg.linear_layer(l) ? m.n_linear++ : m.n_full++);
  TQ_TRY(m.delta_chunk, delta_chunk_from_env());
  m.opts = opts;
  m.inv_freq = std::move(inv_freq);
  m.pool = std::make_unique<ThreadPool>(opts.threads);
  // Our own mapping of the checkpoint: the caller may drop its TensorSource after loading.
  if (const auto* d = dynamic_cast<const DirTensorSource*>(src.tensors.get())) {
    TQ_TRY(m.dir, DirTensorSource::open(d->path()));
  }
  const TensorSource& ts = m.dir ? static_cast<const TensorSource&>(*m.dir) : *src.tensors;
  struct Get {
    FastRuntime& m;
    const TensorSource& ts;
    Status operator()(const TensorSpec& s, PackedMatrix& dst) const {
      TQ_TRY(dst, m.matrix(ts, s));
      return ok_status();
    }
    Status operator()(const TensorSpec& s, std::vector<float>& dst) const {
      return m.vec(ts, s, &dst);
    }
  };
  TQ_CHECK_OK(load_model_tensors(m.cfg, m.t, Get{m, ts}, progress));
  if (m.t.tied) m.t.lm_head = m.t.embed;
  if (opts.mtp) TQ_CHECK_OK(m.load_mtp(src));
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const bool dram = fm->bytes_per_token() >= static_cast<uint64_t>(llc > 0 ? llc : 32 << 20);
  m.slices_per_thread = dram ? 1 : 4;
  for (const FastLayer& L : m.t.layers) {
    if (L.linear) {  // in_proj_a (Hv rows) is left out: three products at most per entry
      m.products.push_back({{&L.lin_qkv, &L.lin_z, &L.lin_b}, 3});
      m.products.push_back({{&L.lin_out}, 1});
    } else {
      m.products.push_back({{&L.q, &L.k, &L.v}, 3});
      m.products.push_back({{&L.o}, 1});
    }
    m.products.push_back({{&L.gate, &L.up}, 2});
    m.products.push_back({{&L.down}, 1});
  }
  m.products.push_back({{&m.t.lm_head}, 1});
  // Prepacked 2/3-bit codes take a nibble each: they must fit the cache at that size.
  uint64_t packed = fm->bytes_per_token();
  for (const ProductRows& p : m.products)
    for (int j = 0; j < p.count; ++j) {
      const PackedMatrix& w = *p.w[static_cast<size_t>(j)];
      if (w.format == WeightFormat::kAffine && w.bits < 4)
        packed += static_cast<uint64_t>(w.rows * (w.cols / 2 - w.row_bytes()));
    }
  const bool fits = packed < static_cast<uint64_t>(llc > 0 ? llc : 32 << 20);
  const bool pre = opts.prepack == Prepack::kOn || (opts.prepack == Prepack::kAuto && fits);
  // From DRAM the lanes decode faster on AMD EPYC, slower on an Intel Xeon (bench/README.md);
  // a 2/3-bit code takes a nibble there, more bytes than its own kernel reads: 4-bit ones only,
  // of mapped files (whose pages are handed back; a GGUF's re-encoded codes may stay beside them).
  const bool pre4 =
      !pre &&
      (opts.prepack == Prepack::kFourBit ||
       (opts.prepack == Prepack::kAuto && m.dir != nullptr && cpu_info().vendor == "AuthenticAMD"));
  if ((pre || pre4) && opts.activations != ActPath::kF32) m.prepack_products(pre ? 0 : 4);
  if (opts.read_ahead > 0) {
    m.read_ahead =
        std::make_unique<ReadAhead>(*m.pool, m.q8_align, m.slices_per_thread, opts.read_ahead);
    m.pool->set_idle_work(m.read_ahead.get());
  }
  return std::unique_ptr<Runtime>(std::move(fm));
}

std::string FastRuntime::name() const {
  const ActPath a = opts.activations;
  return fmt::format("fast ({}, {} threads, {} activations{})", packed_kernel_isa(), pool->size(),
                     a == ActPath::kAuto   ? "auto"
                     : a == ActPath::kInt8 ? "int8"
                                           : "f32",
                     owned_lanes.empty() ? "" : ", prepacked");
}

namespace {

// Elements of a fast cache of `capacity` positions for L attention layers: keys (whole blocks
// of 16), values.
std::pair<size_t, size_t> kv_sizes(const ModelConfig& c, int64_t L, int64_t capacity) {
  const int64_t kvd = c.num_key_value_heads * c.head_dim;
  return {static_cast<size_t>(L * kvd * kv_stride(capacity)),
          static_cast<size_t>(L * kvd * capacity)};
}

// An empty fast cache of L attention layers (no recurrent state).
KvCache attention_cache(const ModelConfig& c, int64_t L, int64_t capacity, KvType type) {
  KvCache kv;
  kv.capacity = std::max<int64_t>(capacity, 0);
  const auto [ks, vs] = kv_sizes(c, L, kv.capacity);
  if (type == KvType::kF16) {
    kv.layout = KvLayout::kFastF16;
    kv.k16.assign(ks, 0), kv.v16.assign(vs, 0);
  } else {
    kv.layout = KvLayout::kFastF32;
    kv.k.assign(ks, 0.0f), kv.v.assign(vs, 0.0f);
  }
  return kv;
}

}  // namespace

KvCache FastRuntime::new_cache(int64_t capacity) const {
  KvCache kv = attention_cache(cfg, n_full, capacity, opts.kv_cache);
  kv.conv.assign(static_cast<size_t>(n_linear * conv_size()), 0.0f);
  kv.ssm.assign(static_cast<size_t>(n_linear * ssm_size()), 0.0f);
  return kv;
}

bool FastRuntime::fits(const KvCache& kv) const {
  if (kv.capacity < 0) return false;
  const auto [ks, vs] = kv_sizes(cfg, n_full, kv.capacity);
  if (kv.conv.size() != static_cast<size_t>(n_linear * conv_size()) ||
      kv.ssm.size() != static_cast<size_t>(n_linear * ssm_size()))
    return false;
  if (opts.kv_cache == KvType::kF16)
    return kv.layout == KvLayout::kFastF16 && kv.k16.size() == ks && kv.v16.size() == vs;
  return kv.layout == KvLayout::kFastF32 && kv.k.size() == ks && kv.v.size() == vs;
}

uint64_t FastRuntime::bytes_per_token() const {
  uint64_t b = t.lm_head.bytes() + t.embed.bytes() / std::max<uint64_t>(t.embed.rows, 1);
  for (const FastLayer& L : t.layers)
    b += L.q.bytes() + L.k.bytes() + L.v.bytes() + L.o.bytes() + L.gate.bytes() + L.up.bytes() +
         L.down.bytes() + L.lin_qkv.bytes() + L.lin_z.bytes() + L.lin_b.bytes() + L.lin_a.bytes() +
         L.lin_out.bytes();
  return b;
}

// RMSNorm over the pool in slices of rows (one slice, inline, when decoding): in scalar code on
// one thread it was ~5% of a SmolLM2 prefill, the other thread spinning.
void FastRuntime::norm(const float* in, const std::vector<float>& w, int64_t rows, int64_t dim,
                       float* out) const {
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  pool->parallel_for(
      rows,
      [&](int64_t b, int64_t e) {
        rms_norm_simd(in + b * dim, w.data(), e - b, dim, eps, out + b * dim);
      },
      std::max<int64_t>(1, 4096 / dim));
}

// Decoding, threads that wait read ahead the rows of the product after the one started.
void FastRuntime::ahead(const FastIo& io, size_t product) const {
  if (read_ahead)
    read_ahead->next(io.n == 1 && !io.mtp ? &products[product % products.size()] : nullptr);
}

void FastRuntime::attn_norm(const FastLayer& L, FastIo& io) const {
  norm(io.x, L.norm_attn, io.n, cfg.hidden_size, io.h);
}

void FastRuntime::qkv(const FastLayer& L, FastIo& io) const {
  if (L.linear) return lin_in(L, io);
  const int64_t hd = cfg.head_dim, n = io.n;
  const int64_t n_heads = cfg.num_attention_heads, n_kv = cfg.num_key_value_heads;
  ahead(io, static_cast<size_t>(io.l) * 4 + 1);
  const bool gated = cfg.attn_output_gate();  // q_proj rows per head: [hd query | hd gate]
  run({{&L.q, gated ? io.qg : io.q, (gated ? 2 : 1) * n_heads * hd, &L.q_b},
       {&L.k, io.k, n_kv * hd, &L.k_b},
       {&L.v, io.v, n_kv * hd, &L.v_b}},
      io.h, n, io.split);
  if (gated)
    for (int64_t r = 0; r < n * n_heads; ++r) {
      std::copy_n(io.qg + 2 * r * hd, hd, io.q + r * hd);
      std::copy_n(io.qg + (2 * r + 1) * hd, hd, io.att_gate + r * hd);
    }
  if (!L.q_norm.empty()) {  // qwen3
    norm(io.q, L.q_norm, n * n_heads, hd, io.q);
    norm(io.k, L.k_norm, n * n_kv, hd, io.k);
  }
  pool->parallel_for(
      n, [&](int64_t b, int64_t e) { rope_rows(cfg, io.cos, io.sin, n, b, e, io.q, io.k); }, 8);
}

void FastRuntime::attn_core(const FastLayer& L, FastIo& io) const {
  if (L.linear) return lin_core(L, io);
  const int64_t qd = cfg.num_attention_heads * cfg.head_dim;
  const int64_t kvd = cfg.num_key_value_heads * cfg.head_dim, l = slot[static_cast<size_t>(io.l)];
  // Where the products go through OpenBLAS, so does prefill attention (the pool spinning
  // beside OpenBLAS's threads would slow both).
  const bool blas = io.split == 0 &&
                    path(std::array<const PackedMatrix*, 3>{&L.q, &L.k, &L.v}, io.n) == Path::kBlas;
  // Each sequence over its own cache.
  for (size_t s = 0; s < io.seqs.size(); ++s) {
    KvCache& c = *io.seqs[s].cache;
    const int64_t r0 = io.first[s], n = static_cast<int64_t>(io.seqs[s].tokens.size());
    const int64_t cap = c.capacity, ks = kv_stride(cap);
    const float *kn = io.k + r0 * kvd, *vn = io.v + r0 * kvd, *q = io.q + r0 * qd;
    float* att = io.att + r0 * qd;
    const bool b = blas && n >= kBlockAttnMinTokens, pre = io.seqs[s].prefill;
    // per_token: one query per call, as decoding them one at a time splits the positions.
    const int64_t calls = io.seqs[s].per_token ? n : 1, m = n / calls;
    for (int64_t i = 0; i < calls; ++i) {
      const int64_t o = i * m;
      if (c.layout == KvLayout::kFastF16)
        attention(c.k16.data() + l * kvd * ks, c.v16.data() + l * cap * kvd, ks, kn + o * kvd,
                  vn + o * kvd, q + o * qd, m, c.n + o, b, pre, att + o * qd);
      else
        attention(c.k.data() + l * kvd * ks, c.v.data() + l * cap * kvd, ks, kn + o * kvd,
                  vn + o * kvd, q + o * qd, m, c.n + o, b, pre, att + o * qd);
    }
  }
}

void FastRuntime::attn_out(const FastLayer& L, FastIo& io) const {
  if (L.linear) return lin_out(L, io);
  const int64_t d = cfg.hidden_size;
  if (cfg.attn_output_gate()) {
    const int64_t qd = cfg.num_attention_heads * cfg.head_dim;
    for (int64_t i = 0; i < io.n * qd; ++i) io.att[i] *= 1.0f / (1.0f + std::exp(-io.att_gate[i]));
  }
  ahead(io, static_cast<size_t>(io.l) * 4 + 2);
  run({{&L.o, io.h, d, &L.o_b}}, io.att, io.n, io.split);
  add_into(io.x, io.h, io.n * d);
}

void FastRuntime::lin_in(const FastLayer& L, FastIo& io) const {
  const int64_t hv = cfg.linear_num_value_heads;
  ahead(io, static_cast<size_t>(io.l) * 4 + 1);
  run({{&L.lin_qkv, io.lin_qkv, cfg.linear_conv_dim(), nullptr},
       {&L.lin_z, io.lin_z, cfg.linear_value_dim(), nullptr},
       {&L.lin_b, io.lin_b, hv, nullptr},
       {&L.lin_a, io.lin_a, hv, nullptr}},
      io.h, io.n, io.split);
}

// Each sequence through its own conv and delta-rule states (zero when it starts at 0); the conv
// channels, q/k rows and value heads split over the pool. Prefills of delta_chunk+ tokens run in
// chunks (the WY form: small OpenBLAS products, each on its pool thread).
void FastRuntime::lin_core(const FastLayer& L, FastIo& io) const {
  const GatedDeltaDims dd{cfg.linear_num_key_heads, cfg.linear_num_value_heads,
                          cfg.linear_key_head_dim, cfg.linear_value_head_dim};
  const int64_t K = cfg.linear_conv_kernel_dim, C = dd.conv_dim(), l = slot[size_t(io.l)];
  for (size_t s = 0; s < io.seqs.size(); ++s) {
    KvCache& c = *io.seqs[s].cache;
    const int64_t r0 = io.first[s], n = static_cast<int64_t>(io.seqs[s].tokens.size());
    float* conv = c.conv.data() + l * conv_size();
    float* state = c.ssm.data() + l * ssm_size();
    if (c.n == 0) std::fill_n(conv, conv_size(), 0.0f), std::fill_n(state, ssm_size(), 0.0f);
    float* qkv = io.lin_qkv + r0 * C;
    const float *b = io.lin_b + r0 * dd.hv, *a = io.lin_a + r0 * dd.hv;
    float* y = io.att + r0 * dd.value_dim();
    if (n == 1) {  // decode: the conv and q/k are too small to split
      causal_conv1d_silu(L.lin_conv.data(), C, K, conv, qkv, n);
      gated_delta_normalize_qk(dd, qkv, n);
    } else {
      pool->parallel_for(
          C,
          [&](int64_t c0, int64_t c1) {
            causal_conv1d_silu(L.lin_conv.data(), C, K, conv, qkv, n, c0, c1);
          },
          16);
      pool->parallel_for(
          n, [&](int64_t t0, int64_t t1) { gated_delta_normalize_qk(dd, qkv + t0 * C, t1 - t0); });
    }
    if (delta_chunk > 1 && n >= delta_chunk && !io.seqs[s].per_token) {
      const BlasOnCallingThread one;
      pool->parallel_for(dd.hv, [&](int64_t h0, int64_t h1) {
        gated_delta_chunks(dd, qkv, b, a, L.lin_a_log.data(), L.lin_dt_bias.data(), state, n, y,
                           delta_chunk, h0, h1);
      });
    } else {  // token by token (decode)
      pool->parallel_for(dd.hv, [&](int64_t h0, int64_t h1) {
        gated_delta_steps(dd, qkv, b, a, L.lin_a_log.data(), L.lin_dt_bias.data(), state, n, y, h0,
                          h1);
      });
    }
  }
}

void FastRuntime::lin_out(const FastLayer& L, FastIo& io) const {
  const int64_t d = cfg.hidden_size, hv = cfg.linear_num_value_heads,
                dv = cfg.linear_value_head_dim;
  const auto eps = static_cast<float>(cfg.rms_norm_eps);
  pool->parallel_for(io.n * hv, [&](int64_t r0, int64_t r1) {
    gated_rms_norm(io.att + r0 * dv, io.lin_z + r0 * dv, L.lin_norm.data(), r1 - r0, dv, eps);
  });
  ahead(io, static_cast<size_t>(io.l) * 4 + 2);
  run({{&L.lin_out, io.h, d, nullptr}}, io.att, io.n, io.split);
  add_into(io.x, io.h, io.n * d);
}

void FastRuntime::mlp_norm(const FastLayer& L, FastIo& io) const {
  norm(io.x, L.norm_mlp, io.n, cfg.hidden_size, io.h);
}

void FastRuntime::mlp_act(const FastLayer& L, FastIo& io) const {
  const int64_t inter = cfg.intermediate_size;
  ahead(io, static_cast<size_t>(io.l) * 4 + 3);
  run({{&L.gate, io.gate, inter, &L.gate_b}, {&L.up, io.up, inter, &L.up_b}}, io.h, io.n, io.split);
  pool->parallel_for(
      io.n * inter, [&](int64_t b, int64_t e) { silu_mul_simd(io.gate + b, io.up + b, e - b); },
      4096);
}

void FastRuntime::mlp_out(const FastLayer& L, FastIo& io) const {
  const int64_t d = cfg.hidden_size;
  ahead(io, static_cast<size_t>(io.l) * 4 + 4);
  run({{&L.down, io.h, d, &L.down_b}}, io.gate, io.n, io.split);
  add_into(io.x, io.h, io.n * d);
}

void FastRuntime::bind(FastIo& io, int64_t n, int64_t out_rows) const {
  const ModelConfig& c = cfg;
  const int64_t d = c.hidden_size, half = c.rotary_dims() / 2;
  const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
    return v.data();
  };
  io.x = grow(x, n * d), io.h = grow(h, std::max(n, out_rows) * d);
  io.q = grow(q, n * qd), io.att = grow(att, n * std::max(qd, c.linear_value_dim()));
  if (c.family == Family::kQwen35) {
    io.qg = grow(qg, 2 * n * qd), io.att_gate = grow(att_gate, n * qd);
    io.lin_qkv = grow(lin_qkv, n * c.linear_conv_dim());
    io.lin_z = grow(lin_z, n * c.linear_value_dim());
    io.lin_b = grow(lin_b, n * c.linear_num_value_heads);
    io.lin_a = grow(lin_a, n * c.linear_num_value_heads);
  }
  // gate also holds the rows that get logits once the layers are done (forward).
  io.gate = grow(gate, std::max(n * inter, out_rows * d)), io.up = grow(up, n * inter);
  io.k = grow(knew, n * kvd), io.v = grow(vnew, n * kvd);
  io.cos = grow(cos, n * half), io.sin = grow(sin, n * half);
}

Status FastRuntime::forward(std::span<const SeqStep> seqs) const {
  std::lock_guard<std::mutex> lock(mu);
  const ModelConfig& c = cfg;
  const int64_t d = c.hidden_size, half = c.rotary_dims() / 2, vocab = c.vocab_size;
  FastIo io;
  io.seqs = seqs;
  // Rows: those on the per-token kernels first (io.split of them), then the others, each in
  // call order.
  auto ntok = [&](size_t s) { return static_cast<int64_t>(seqs[s].tokens.size()); };
  auto head_rows = [&](size_t s) { return seqs[s].all_logits ? ntok(s) : 1; };
  // Body rows of prefill steps stay on the batch kernels at one token too; every logits row of
  // one alone takes the per-token kernels.
  auto per_token = [&](size_t s, int64_t rows, bool body) {
    return seqs[s].per_token || (opts.batch_invariant && rows == 1 && !(body && seqs[s].prefill));
  };
  io.first.assign(seqs.size(), 0);
  int64_t out_rows = 0;
  for (const bool first : {true, false})
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (per_token(s, ntok(s), true) != first) continue;
      io.first[s] = io.n;
      io.n += ntok(s);
      if (first) io.split = io.n;
    }
  for (size_t s = 0; s < seqs.size(); ++s) out_rows += head_rows(s);
  const int64_t n = io.n;

  bind(io, n, out_rows);
  float *cs = cos.data(), *sn = sin.data();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t r0 = io.first[s], ns = static_cast<int64_t>(seqs[s].tokens.size());
    rope_table(inv_freq, seqs[s].cache->n, ns, cs + r0 * half, sn + r0 * half);
    for (int64_t i = 0; i < ns; ++i)
      packed_decode_row(t.embed, seqs[s].tokens[i], io.x + (r0 + i) * d);
  }
  io.cos = cs, io.sin = sn;
  for (io.l = 0; io.l < c.num_hidden_layers; ++io.l)
    run_layer(*this, t.layers[static_cast<size_t>(io.l)], io);
  for (const SeqStep& s : seqs) s.cache->n += static_cast<int64_t>(s.tokens.size());

  // The rows that want logits, gathered (one-row sequences first, as above), then one head
  // product for all of them.
  std::vector<int64_t> at(seqs.size());  // each sequence's first row among them
  int64_t head_split = 0, o = 0;
  for (const bool first : {true, false})
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (per_token(s, head_rows(s), false) != first) continue;
      at[s] = o;
      o += head_rows(s);
      if (first) head_split = o;
    }
  float* xs = io.x;
  if (out_rows != n || seqs.size() > 1) {
    xs = gate.data();  // free once the layers are done (bind: room for out_rows * d)
    for (size_t s = 0; s < seqs.size(); ++s)
      std::copy_n(io.x + (io.first[s] + ntok(s) - head_rows(s)) * d, head_rows(s) * d,
                  xs + at[s] * d);
  }
  for (size_t s = 0; s < seqs.size(); ++s)
    if (!seqs[s].hidden.empty())
      std::copy_n(xs + at[s] * d, head_rows(s) * d, seqs[s].hidden.data());
  norm(xs, t.norm_final, out_rows, d, io.h);
  ahead(io, 0);  // the next token's first product
  if (seqs.size() == 1) {
    run({{&t.lm_head, seqs[0].logits.data(), vocab, nullptr}}, io.h, out_rows, head_split);
    return ok_status();
  }
  if (static_cast<int64_t>(logits_all.size()) < out_rows * vocab)
    logits_all.resize(static_cast<size_t>(out_rows * vocab));
  float* lg = logits_all.data();
  run({{&t.lm_head, lg, vocab, nullptr}}, io.h, out_rows, head_split);
  for (size_t s = 0; s < seqs.size(); ++s)
    std::copy_n(lg + at[s] * vocab, head_rows(s) * vocab, seqs[s].logits.data());
  return ok_status();
}

Status FastRuntime::load_mtp(const ModelSource& src) {
  ModelConfig mc;
  TQ_TRY(mtp_src, open_mtp_source(src, &mc));
  struct Get {
    FastRuntime& m;
    const TensorSource& ts;
    Status operator()(const TensorSpec& s, PackedMatrix& dst) const {
      TQ_TRY(dst, m.matrix(ts, s));
      return ok_status();
    }
    Status operator()(const TensorSpec& s, std::vector<float>& dst) const {
      return m.vec(ts, s, &dst);
    }
  };
  TQ_CHECK_OK(load_mtp_tensors(mc, mtp, Get{*this, *mtp_src}));
  slot.push_back(0);  // the MTP layer's keys and values: the only layer of its cache
  return ok_status();
}

KvCache FastRuntime::new_mtp_cache(int64_t capacity) const {
  return attention_cache(cfg, 1, capacity, opts.kv_cache);
}

bool FastRuntime::fits_mtp(const KvCache& kv) const {
  if (kv.capacity < 0 || !kv.conv.empty() || !kv.ssm.empty()) return false;
  const auto [ks, vs] = kv_sizes(cfg, 1, kv.capacity);
  if (opts.kv_cache == KvType::kF16)
    return kv.layout == KvLayout::kFastF16 && kv.k16.size() == ks && kv.v16.size() == vs;
  return kv.layout == KvLayout::kFastF32 && kv.k.size() == ks && kv.v.size() == vs;
}

// fc over [normed embedding | normed hidden], the one layer step, mtp.norm, the trunk's head.
Status FastRuntime::mtp_forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                                KvCache& cache, std::span<float> logits) const {
  std::lock_guard<std::mutex> lock(mu);
  const int64_t n = static_cast<int64_t>(next_tokens.size()), d = cfg.hidden_size;
  const SeqStep one{next_tokens, &cache, logits, true};
  FastIo io;
  io.seqs = {&one, 1};
  io.first = {0};
  io.n = n, io.l = cfg.num_hidden_layers, io.mtp = true;
  bind(io, n, n);
  if (static_cast<int64_t>(mtp_in.size()) < 2 * n * d)
    mtp_in.resize(static_cast<size_t>(2 * n * d));
  for (int64_t i = 0; i < n; ++i) packed_decode_row(t.embed, next_tokens[i], io.h + i * d);
  mtp_fc_input(io.h, hidden.data(), mtp.norm_emb, mtp.norm_hidden, n, d,
               static_cast<float>(cfg.rms_norm_eps), mtp_in.data());
  run({{&mtp.fc, io.x, d, nullptr}}, mtp_in.data(), n);
  rope_table(inv_freq, cache.n, n, cos.data(), sin.data());
  run_layer(*this, mtp.layer, io);
  cache.n += n;
  norm(io.x, mtp.norm_final, n, d, io.h);
  run({{&t.lm_head, logits.data(), cfg.vocab_size, nullptr}}, io.h, n);
  return ok_status();
}

}  // namespace tq
