// The fast forward pass: model/forward.cc's loop, with packed matrices used in place,
// products split by output rows over a thread pool, and decode attention over the KV cache
// per head into reused scratch.
#include "model/fast_forward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <mutex>
#include <span>

#include <cblas.h>
#include <fmt/format.h>

#include "base/thread_pool.h"
#include "io/checkpoint_dir.h"
#include "kernels/amx_matmul.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kernels/packed_matmul.h"
#include "kernels/vec_ops.h"
#include "model/tensor_table.h"

namespace tq {

namespace {

struct FastLayer {
  PackedMatrix q, k, v, o;                 // [qd, d], [kvd, d], [kvd, d], [d, qd]
  PackedMatrix gate, up, down;             // [inter, d], [inter, d], [d, inter]
  std::vector<float> norm_attn, norm_mlp;  // [d]
  std::vector<float> q_norm, k_norm;       // [hd] (qwen3), else empty
  std::vector<float> q_b, k_b, v_b, o_b;   // biases (qwen2), else empty
  std::vector<float> gate_b, up_b, down_b;
};

// One product of a fused batch: y[t * ldy + r] = x[t] · W[r] (+ bias[r]).
struct MatJob {
  const PackedMatrix* w;
  float* y;
  int64_t ldy;
  const std::vector<float>* bias;
};

// From this many tokens on, products go through decoded strips and OpenBLAS (f32 activations),
// or with --activations auto from kAutoBlasMinTokens on: below it the integer kernels, which
// read each weight once per call, beat decoding whole matrices to f32 (SmolLM2 4-bit prefill
// at 16 / 64 / 256 tokens: integer 180 / 200 / 160 tok/s, OpenBLAS 90 / 240 / 360).
constexpr int64_t kBlasMinTokens = 16;
constexpr int64_t kAutoBlasMinTokens = 48;
// On CPUs with AMX, int8 products of this many tokens and more go through the tile kernel.
constexpr int64_t kAmxMinTokens = 16;
// From this many tokens on, attention runs in blocks of queries over transposed keys.
constexpr int64_t kBlockAttnMinTokens = 8;

void add_into(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

struct FastModel::Impl {
  ModelConfig cfg;
  RuntimeOptions opts;
  std::vector<double> inv_freq;
  std::unique_ptr<DirTensorSource> dir;  // the mapped files the matrices point into
  std::deque<std::vector<float>> owned;  // f32 matrices that could not be used in place
  PackedMatrix embed, lm_head;           // lm_head = embed when tied
  std::vector<float> norm_final;
  std::vector<FastLayer> layers;
  std::unique_ptr<ThreadPool> pool;

  // Scratch reused across calls (forward is one call at a time: the mutex).
  mutable std::mutex mu;
  mutable std::vector<float> x, h, q, att, gate, up, cos, sin, kt;
  mutable ActQ8 xq;
  mutable ActTiles xt;

  Result<PackedMatrix> matrix(const TensorSource& ts, const TensorSpec& s);
  Status vec(const TensorSource& ts, const TensorSpec& s, std::vector<float>* out);
  void run(std::initializer_list<MatJob> jobs, const float* xin, int64_t n) const;
  void run_blas(std::initializer_list<MatJob> jobs, const float* xin, int64_t n) const;
  // How products of n tokens with these matrices run (run() and the attention choice agree).
  enum class Path { kAmx, kBlas, kKernels };
  Path path(std::span<const PackedMatrix* const> ws, int64_t n) const;
  template <typename F>
  void split_rows(std::initializer_list<MatJob> jobs, int64_t n, int64_t align, F&& product) const;
  mutable std::vector<float> dense;  // a strip of rows decoded for the prefill GEMM
};

Result<PackedMatrix> FastModel::Impl::matrix(const TensorSource& ts, const TensorSpec& s) {
  const TensorInfo* ti = ts.find(s.name);
  if (ti == nullptr) return err("{}: no tensor '{}'", ts.path(), s.name);
  if (ti->shape != s.shape || s.shape.size() != 2)
    return err("{}: tensor '{}' has shape {}, the config implies {}", ts.path(), s.name,
               shape_str(ti->shape), shape_str(s.shape));
  const int64_t rows = s.shape[0], cols = s.shape[1];
  if (dir) {
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
  // GGUF blocks and other storage: decoded once to f32 (as the reference runtime does).
  TQ_TRY(FloatTensor f, ts.load_f32_compute(s.name));
  owned.push_back(std::move(f.data));
  const auto& v = owned.back();
  return make_float_matrix(DType::kF32, rows, cols,
                           {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)});
}

Status FastModel::Impl::vec(const TensorSource& ts, const TensorSpec& s, std::vector<float>* out) {
  TQ_TRY(FloatTensor f, ts.load_f32(s.name));
  if (f.shape != s.shape)
    return err("{}: tensor '{}' has shape {}, the config implies {}", ts.path(), s.name,
               shape_str(f.shape), shape_str(s.shape));
  *out = std::move(f.data);
  return ok_status();
}

FastModel::Impl::Path FastModel::Impl::path(std::span<const PackedMatrix* const> ws,
                                            int64_t n) const {
  const ActPath act = opts.activations;
  if (act != ActPath::kF32 && n >= kAmxMinTokens && amx_available() &&
      std::all_of(ws.begin(), ws.end(), [](const PackedMatrix* w) { return amx_supported(*w); }))
    return Path::kAmx;
  if (act == ActPath::kF32 ? n >= kBlasMinTokens : act == ActPath::kAuto && n >= kAutoBlasMinTokens)
    return Path::kBlas;
  return Path::kKernels;
}

// The products in `jobs` share the input x[n, cols]; their output rows are concatenated and
// split over the pool in one pass (slice bounds multiples of `align`); product(job, lo, hi)
// fills rows [lo, hi) of one job, then its bias is added.
template <typename F>
void FastModel::Impl::split_rows(std::initializer_list<MatJob> jobs, int64_t n, int64_t align,
                                 F&& product) const {
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
      align);
}

void FastModel::Impl::run(std::initializer_list<MatJob> jobs, const float* xin, int64_t n) const {
  std::vector<const PackedMatrix*> ws;
  for (const MatJob& j : jobs) ws.push_back(j.w);
  const Path p = path(ws, n);
  if (p == Path::kBlas) return run_blas(jobs, xin, n);
  if (p == Path::kAmx) {
    // x quantized to tiles by token ranges, then rows split in multiples of the tile height.
    act_tiles_init(n, jobs.begin()->w->cols, &xt);
    pool->parallel_for(n, [&](int64_t b, int64_t e) { quantize_act_tiles(xin, b, e, &xt); });
    split_rows(jobs, n, 16, [&](const MatJob& j, int64_t lo, int64_t hi) {
      packed_matmul_amx(*j.w, xt, j.y, j.ldy, lo, hi);
    });
    return;
  }
  bool q8 = false;
  if (opts.activations != ActPath::kF32)
    for (const MatJob& j : jobs) q8 |= packed_q8_supported(*j.w);
  if (q8) quantize_act_q8(xin, n, jobs.begin()->w->cols, &xq);
  split_rows(jobs, n, 8, [&](const MatJob& j, int64_t lo, int64_t hi) {
    if (q8 && packed_q8_supported(*j.w))
      packed_matmul_q8(*j.w, xq, j.y, j.ldy, lo, hi);
    else
      packed_matmul(*j.w, xin, n, j.y, j.ldy, lo, hi);
  });
}

// Prefill: strips of rows decoded to f32, then one OpenBLAS GEMM per strip (its
// own threads), so long prompts run at dense-GEMM speed while the weights stay packed.
void FastModel::Impl::run_blas(std::initializer_list<MatJob> jobs, const float* xin,
                               int64_t n) const {
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

FastModel::FastModel() : impl_(std::make_unique<Impl>()) {}
FastModel::~FastModel() = default;

Result<std::unique_ptr<FastModel>> FastModel::load(const ModelSource& src,
                                                   const RuntimeOptions& opts,
                                                   std::vector<double> inv_freq,
                                                   std::function<void(int64_t, int64_t)> progress) {
  std::unique_ptr<FastModel> fm(new FastModel());
  Impl& m = *fm->impl_;
  m.cfg = src.config;
  m.opts = opts;
  m.inv_freq = std::move(inv_freq);
  m.pool = std::make_unique<ThreadPool>(opts.threads);
  // Our own mapping of the checkpoint: the caller may drop its TensorSource after loading.
  if (const auto* d = dynamic_cast<const DirTensorSource*>(src.tensors.get())) {
    TQ_TRY(m.dir, DirTensorSource::open(d->path()));
  }
  const TensorSource& ts = m.dir ? static_cast<const TensorSource&>(*m.dir) : *src.tensors;
  m.layers.resize(static_cast<size_t>(m.cfg.num_hidden_layers));
  std::vector<TensorSpec> specs = expected_tensors(m.cfg);
  bool has_head = false;
  const int64_t total = static_cast<int64_t>(specs.size());
  for (int64_t i = 0; i < total; ++i) {
    const TensorSpec& s = specs[static_cast<size_t>(i)];
    using R = TensorRole;
    const R role = s.kind->role;
    if (s.layer < 0) {
      if (role == R::kEmbed) {
        TQ_TRY(m.embed, m.matrix(ts, s));
      } else if (role == R::kLmHead) {
        TQ_TRY(m.lm_head, m.matrix(ts, s));
        has_head = true;
      } else if (role == R::kNormFinal) {
        TQ_CHECK_OK(m.vec(ts, s, &m.norm_final));
      }
    } else {
      FastLayer& L = m.layers[static_cast<size_t>(s.layer)];
      PackedMatrix* mat = nullptr;
      std::vector<float>* v = nullptr;
      switch (role) {
        case R::kAttnQ:
          mat = &L.q;
          break;
        case R::kAttnK:
          mat = &L.k;
          break;
        case R::kAttnV:
          mat = &L.v;
          break;
        case R::kAttnO:
          mat = &L.o;
          break;
        case R::kMlpGate:
          mat = &L.gate;
          break;
        case R::kMlpUp:
          mat = &L.up;
          break;
        case R::kMlpDown:
          mat = &L.down;
          break;
        case R::kNormAttn:
          v = &L.norm_attn;
          break;
        case R::kNormMlp:
          v = &L.norm_mlp;
          break;
        case R::kQNorm:
          v = &L.q_norm;
          break;
        case R::kKNorm:
          v = &L.k_norm;
          break;
        case R::kAttnQBias:
          v = &L.q_b;
          break;
        case R::kAttnKBias:
          v = &L.k_b;
          break;
        case R::kAttnVBias:
          v = &L.v_b;
          break;
        case R::kAttnOBias:
          v = &L.o_b;
          break;
        case R::kMlpGateBias:
          v = &L.gate_b;
          break;
        case R::kMlpUpBias:
          v = &L.up_b;
          break;
        case R::kMlpDownBias:
          v = &L.down_b;
          break;
        default:
          break;
      }
      if (mat != nullptr) {
        TQ_TRY(*mat, m.matrix(ts, s));
      } else if (v != nullptr) {
        TQ_CHECK_OK(m.vec(ts, s, v));
      }
    }
    if (progress) progress(i + 1, total);
  }
  if (!has_head) m.lm_head = m.embed;
  return fm;
}

std::string FastModel::name() const {
  const ActPath a = impl_->opts.activations;
  return fmt::format("fast ({}, {} threads, {} activations)", packed_kernel_isa(),
                     impl_->pool->size(),
                     a == ActPath::kAuto   ? "auto"
                     : a == ActPath::kInt8 ? "int8"
                                           : "f32");
}

int FastModel::threads() const { return impl_->pool->size(); }

uint64_t FastModel::bytes_per_token() const {
  const Impl& m = *impl_;
  uint64_t b = m.lm_head.bytes() + m.embed.bytes() / std::max<uint64_t>(m.embed.rows, 1);
  for (const FastLayer& L : m.layers)
    b += L.q.bytes() + L.k.bytes() + L.v.bytes() + L.o.bytes() + L.gate.bytes() + L.up.bytes() +
         L.down.bytes();
  return b;
}

Status FastModel::forward(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
                          bool all_logits) const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  const ModelConfig& c = m.cfg;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t d = c.hidden_size, hd = c.head_dim, half = hd / 2;
  const int64_t n_heads = c.num_attention_heads, n_kv = c.num_key_value_heads;
  const int64_t qd = n_heads * hd, kvd = n_kv * hd, inter = c.intermediate_size;
  const int64_t vocab = c.vocab_size, cap = cache.capacity, p0 = cache.n;
  const int64_t group = n_heads / n_kv, out_rows = all_logits ? n : 1;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));

  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  grow(m.x, n * d), grow(m.h, n * d), grow(m.q, n * qd), grow(m.att, n * qd);
  grow(m.gate, n * inter), grow(m.up, n * inter), grow(m.cos, n * half), grow(m.sin, n * half);
  float *x = m.x.data(), *h = m.h.data(), *q = m.q.data(), *att = m.att.data();
  for (int64_t i = 0; i < n; ++i) {
    packed_decode_row(m.embed, tokens[i], x + i * d);
    rope_angles(m.inv_freq.data(), half, p0 + i, m.cos.data() + i * half, m.sin.data() + i * half);
  }

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const FastLayer& L = m.layers[static_cast<size_t>(l)];
    float* kc = cache.k.data() + l * cap * kvd;  // [cap, kvd]
    float* vc = cache.v.data() + l * cap * kvd;
    float* k_new = kc + p0 * kvd;
    float* v_new = vc + p0 * kvd;

    rms_norm(x, L.norm_attn.data(), n, d, eps, h);
    m.run({{&L.q, q, qd, &L.q_b}, {&L.k, k_new, kvd, &L.k_b}, {&L.v, v_new, kvd, &L.v_b}}, h, n);
    if (!L.q_norm.empty()) {  // qwen3
      rms_norm(q, L.q_norm.data(), n * n_heads, hd, eps, q);
      rms_norm(k_new, L.k_norm.data(), n * n_kv, hd, eps, k_new);
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* ci = m.cos.data() + i * half;
      const float* si = m.sin.data() + i * half;
      for (int64_t hh = 0; hh < n_heads; ++hh)
        rope_rotate(q + i * qd + hh * hd, hd, ci, si, c.rope_traditional);
      for (int64_t hh = 0; hh < n_kv; ++hh)
        rope_rotate(k_new + i * kvd + hh * hd, hd, ci, si, c.rope_traditional);
    }
    if (n < kBlockAttnMinTokens) {
      // Decode: one (token, head) pair per task, scores in per-thread scratch.
      m.pool->parallel_for(n * n_heads, [&](int64_t b, int64_t e) {
        thread_local std::vector<float> scores;
        if (static_cast<int64_t>(scores.size()) < p0 + n)
          scores.resize(static_cast<size_t>(p0 + n));
        for (int64_t idx = b; idx < e; ++idx) {
          const int64_t i = idx / n_heads, hh = idx % n_heads, g = hh / group;
          attend_one(q + i * qd + hh * hd, kc + g * hd, vc + g * hd, p0 + i + 1, kvd, hd, scale,
                     scores.data(), att + i * qd + hh * hd);
        }
      });
    } else if (m.path(std::array<const PackedMatrix*, 3>{&L.q, &L.k, &L.v}, n) ==
               Impl::Path::kBlas) {
      // Products go through OpenBLAS here: so does attention (the pool spinning beside
      // OpenBLAS's threads would slow both).
      causal_attention(q, kc, vc, n, p0, n_heads, n_kv, hd, scale, att);
    } else {
      // Prefill: keys transposed once per KV head, then blocks of 8 queries per task; block p
      // is paired with the last-but-p so that contiguous slices carry equal causal work.
      const int64_t lpad = (p0 + n + 15) / 16 * 16, nblk = (n + 7) / 8;
      grow(m.kt, n_kv * hd * lpad);
      m.pool->parallel_for(n_kv, [&](int64_t b, int64_t e) {
        for (int64_t g = b; g < e; ++g)
          transpose_keys(kc + g * hd, p0 + n, kvd, hd, lpad, m.kt.data() + g * hd * lpad);
      });
      m.pool->parallel_for((nblk + 1) / 2 * n_heads, [&](int64_t b, int64_t e) {
        thread_local std::vector<float> scores;
        if (static_cast<int64_t>(scores.size()) < 8 * (p0 + n + 24))
          scores.resize(static_cast<size_t>(8 * (p0 + n + 24)));
        for (int64_t idx = b; idx < e; ++idx) {
          const int64_t p = idx / n_heads, hh = idx % n_heads, g = hh / group;
          for (const int64_t blk : {p, nblk - 1 - p}) {
            const int64_t i0 = blk * 8, nq = std::min<int64_t>(8, n - i0);
            attend_block(q + i0 * qd + hh * hd, nq, qd, kc + g * hd, m.kt.data() + g * hd * lpad,
                         lpad, vc + g * hd, kvd, hd, p0 + i0 + 1, scale, scores.data(),
                         att + i0 * qd + hh * hd, qd);
            if (blk == nblk - 1 - p) break;
          }
        }
      });
    }
    m.run({{&L.o, h, d, &L.o_b}}, att, n);
    add_into(x, h, n * d);

    rms_norm(x, L.norm_mlp.data(), n, d, eps, h);
    m.run({{&L.gate, m.gate.data(), inter, &L.gate_b}, {&L.up, m.up.data(), inter, &L.up_b}}, h, n);
    silu_mul(m.gate.data(), m.up.data(), n * inter);
    m.run({{&L.down, h, d, &L.down_b}}, m.gate.data(), n);
    add_into(x, h, n * d);
  }
  cache.n = p0 + n;

  rms_norm(x + (n - out_rows) * d, m.norm_final.data(), out_rows, d, eps, h);
  m.run({{&m.lm_head, logits.data(), vocab, nullptr}}, h, out_rows);
  return ok_status();
}

}  // namespace tq
