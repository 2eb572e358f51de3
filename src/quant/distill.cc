#include "quant/distill.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numbers>

#include "base/thread_pool.h"
#include "formats/mlx_quant.h"
#include "io/checkpoint_dir.h"
#include "kernels/vec_ops.h"
#include "model/f32_backward.h"
#include "model/f32_model.h"
#include "model/layer.h"
#include "model/rope.h"

namespace tq {

namespace {

// One affine-quantized matrix being trained: fixed codes, master scales and biases (f32) and
// Adam's moments, one entry per group.
struct AffineParam {
  std::string module;  // "model.layers.0.self_attn.q_proj"
  TensorRole role = TensorRole::kAttnQ;
  int64_t layer = -1, rows = 0, cols = 0, group = 0;
  DType dtype = DType::kBF16;  // of the stored scales and biases
  std::vector<uint8_t> codes;  // [rows, cols]
  std::vector<float> unit;     // |initial scale| per group: Adam's step unit
  std::vector<float> s, b, gs, gb, ms, vs, mb, vb;
  std::vector<float>* field = nullptr;  // the student's f32 matrix
  int64_t groups() const { return rows * (cols / group); }
};

// One RMSNorm weight being trained, with Adam's moments; its step unit is the mean |w|.
struct NormParam {
  std::string name;  // "model.layers.0.input_layernorm.weight"
  TensorRole role = TensorRole::kNormAttn;
  int64_t layer = -1;
  DType dtype = DType::kBF16;
  float offset = 0.0f;  // what the loader added (zero-centred norms: 1)
  std::vector<float> w, g, m, v, unit;
  std::vector<float>* field = nullptr;
};

float stored_value(DType t, float v, bool round = true) {
  if (!round) return v;
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

std::vector<uint8_t> encode(DType t, const std::vector<float>& v) {
  const size_t width = t == DType::kF32 ? 4 : 2;
  std::vector<uint8_t> out(v.size() * width);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// The student's matrix from the codes and the scales and biases as they will be stored,
// s·q + b evaluated in f32 (what load_f32_compute gives).
void dequantize_into(const AffineParam& p, bool round, ThreadPool& pool) {
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    float* w = p.field->data();
    const int64_t per_row = p.cols / p.group;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t g = 0; g < per_row; ++g) {
        const int64_t gi = r * per_row + g;
        const float s = stored_value(p.dtype, p.s[gi], round);
        const float b = stored_value(p.dtype, p.b[gi], round);
        const uint8_t* q = p.codes.data() + r * p.cols + g * p.group;
        float* o = w + r * p.cols + g * p.group;
        for (int64_t j = 0; j < p.group; ++j) o[j] = s * static_cast<float>(q[j]) + b;
      }
  });
}

// dL/ds = Σ dL/dw · q and dL/db = Σ dL/dw over each group (straight through the rounding).
void accumulate_group_grads(AffineParam& p, const float* dw, ThreadPool& pool) {
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    const int64_t per_row = p.cols / p.group;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t g = 0; g < per_row; ++g) {
        const int64_t gi = r * per_row + g;
        const uint8_t* q = p.codes.data() + r * p.cols + g * p.group;
        const float* d = dw + r * p.cols + g * p.group;
        float ss = 0.0f, sb = 0.0f;
        for (int64_t j = 0; j < p.group; ++j) {
          ss += d[j] * static_cast<float>(q[j]);
          sb += d[j];
        }
        p.gs[gi] += ss, p.gb[gi] += sb;
      }
  });
}

// One Adam step (β 0.9 / 0.999, bias-corrected at step t) of x by lr·unit, clearing g.
void adam_step(std::vector<float>& x, std::vector<float>& g, std::vector<float>& m,
               std::vector<float>& v, const std::vector<float>& unit, double lr, int64_t t,
               ThreadPool& pool) {
  constexpr double b1 = 0.9, b2 = 0.999;
  const double c1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double c2 = 1.0 - std::pow(b2, static_cast<double>(t));
  pool.parallel_for(static_cast<int64_t>(x.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      m[i] = static_cast<float>(b1 * m[i] + (1.0 - b1) * g[i]);
      v[i] = static_cast<float>(b2 * v[i] + (1.0 - b2) * static_cast<double>(g[i]) * g[i]);
      g[i] = 0.0f;
      const double vh = v[i] / c2;
      if (vh <= 0.0) continue;
      x[i] -= static_cast<float>(lr * unit[i] * (m[i] / c1) / (std::sqrt(vh) + 1e-30));
    }
  });
}

void adam_update(AffineParam& p, double lr, int64_t t, ThreadPool& pool) {
  adam_step(p.s, p.gs, p.ms, p.vs, p.unit, lr, t, pool);
  adam_step(p.b, p.gb, p.mb, p.vb, p.unit, lr, t, pool);
}

void adam_update(NormParam& p, double lr, int64_t t, bool round, ThreadPool& pool) {
  adam_step(p.w, p.g, p.m, p.v, p.unit, lr, t, pool);
  for (size_t i = 0; i < p.w.size(); ++i) (*p.field)[i] = stored_value(p.dtype, p.w[i], round);
}

// Mean KL(teacher || student) of rows at temperature T; `dstudent` (may alias `student`) gets
// dL/dlogits of the mean. Rows are independent: each slice of them keeps its own exponentials.
double kl_and_grad(const float* teacher, float* student, int64_t rows, int64_t vocab, double T,
                   float* dstudent, ThreadPool& pool) {
  const float inv_t = static_cast<float>(1.0 / T);
  std::vector<double> row_kl(static_cast<size_t>(rows));
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> et(static_cast<size_t>(vocab)), es(static_cast<size_t>(vocab));
    for (int64_t r = r0; r < r1; ++r) {
      const float* zt = teacher + r * vocab;
      float* zs = student + r * vocab;
      for (int64_t i = 0; i < vocab; ++i) et[i] = zt[i] * inv_t, es[i] = zs[i] * inv_t;
      const float mt = max_simd(et.data(), vocab), ms = max_simd(es.data(), vocab);
      const double st = exp_sub_sum_simd(et.data(), vocab, mt);
      const double ss = exp_sub_sum_simd(es.data(), vocab, ms);
      // log pt - log ps = (zt - zs) / T - (mt - ms) - log st + log ss
      const double c = -(static_cast<double>(mt) - ms) - std::log(st) + std::log(ss);
      double kl = 0.0;
      for (int64_t i = 0; i < vocab; ++i)
        kl += static_cast<double>(et[i]) * ((static_cast<double>(zt[i]) - zs[i]) * inv_t + c);
      row_kl[r] = kl / st;
      if (dstudent != nullptr) {
        const float ft = static_cast<float>(1.0 / st), fs = static_cast<float>(1.0 / ss);
        const float k = static_cast<float>(1.0 / (T * static_cast<double>(rows)));
        for (int64_t i = 0; i < vocab; ++i) dstudent[r * vocab + i] = (es[i] * fs - et[i] * ft) * k;
      }
    }
  });
  double total = 0.0;
  for (double v : row_kl) total += v;
  return total / static_cast<double>(rows);
}

Status same_geometry(const ModelConfig& a, const ModelConfig& b) {
  if (a.family != b.family || a.hidden_size != b.hidden_size ||
      a.num_hidden_layers != b.num_hidden_layers || a.intermediate_size != b.intermediate_size ||
      a.num_attention_heads != b.num_attention_heads ||
      a.num_key_value_heads != b.num_key_value_heads || a.head_dim != b.head_dim ||
      a.vocab_size != b.vocab_size)
    return err(
        "the quantized model's geometry differs from the float model's (family, hidden, "
        "layers, intermediate, heads, head_dim or vocabulary): not a quantization of it");
  return ok_status();
}

}  // namespace

Result<DistillResult> distill_scales(const ModelSource& teacher, const ModelSource& student,
                                     const CalibSet& calib, const DistillOptions& o,
                                     const std::function<void(const DistillProgress&)>& progress) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  if (o.steps < 0) return err("distill: steps must be 0 or more, got {}", o.steps);
  if (o.seqs_per_step < 1) return err("distill: rows per step must be 1 or more");
  if (!(o.lr > 0.0)) return err("distill: the learning rate must be positive, got {}", o.lr);
  if (!(o.temperature > 0.0))
    return err("distill: the temperature must be positive, got {}", o.temperature);
  if (o.holdout_rows < 0) return err("distill: held-out rows must be 0 or more");
  if (calib.rows() < o.holdout_rows + o.seqs_per_step)
    return err("distill: the calibration set has {} rows; {} held out + {} per step are needed",
               calib.rows(), o.holdout_rows, o.seqs_per_step);
  const ModelConfig& cfg = student.config;
  TQ_CHECK_OK(F32Backprop::supports(cfg));
  TQ_CHECK_OK(same_geometry(teacher.config, cfg));
  const auto* dir = dynamic_cast<const DirTensorSource*>(student.tensors.get());
  if (dir == nullptr || student.kind != SourceKind::kMlxDir)
    return err("{}: distillation trains an MLX quantized directory's scales and biases",
               student.path);

  TQ_TRY(std::unique_ptr<F32Model> tm, F32Model::load(teacher));
  TQ_TRY(std::vector<double> inv_freq, rope_inv_freq(cfg));
  F32Tensors st;
  auto get = [&](const TensorSpec& s, std::vector<float>& dst) -> Status {
    TQ_TRY(FloatTensor f, student.tensors->load_f32_compute(s.name));
    if (f.shape != s.shape)
      return err("{}: tensor '{}' has shape {}, the config implies {}", student.path, s.name,
                 shape_str(f.shape), shape_str(s.shape));
    dst = std::move(f.data);
    return ok_status();
  };
  TQ_CHECK_OK(load_model_tensors(cfg, st, get, [](int64_t, int64_t) {}));

  // The trainable matrices: every affine-quantized one.
  std::vector<AffineParam> params;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (!s.kind->quantizable) continue;
    const TensorInfo* info = student.tensors->find(s.name);
    if (info == nullptr || !info->mlx_quant || info->mlx_quant->mode != QuantMode::kAffine)
      continue;
    AffineParam p;
    p.module = s.name.substr(0, s.name.size() - std::string(".weight").size());
    p.role = s.kind->role, p.layer = s.layer;
    p.rows = s.shape[0], p.cols = s.shape[1], p.group = info->mlx_quant->group_size;
    p.dtype = info->stored_dtype;
    size_t fw = 0, fs = 0, fb = 0;
    const SafetensorsEntry* we = dir->stored(p.module + ".weight", &fw);
    const SafetensorsEntry* se = dir->stored(p.module + ".scales", &fs);
    const SafetensorsEntry* be = dir->stored(p.module + ".biases", &fb);
    if (we == nullptr || se == nullptr || be == nullptr)
      return err("{}: '{}' lacks its weight, scales or biases", student.path, p.module);
    const int bits = info->mlx_quant->bits;
    const std::span<const uint8_t> wb = dir->files()[fw].data(*we);
    const std::span<const uint8_t> sb = dir->files()[fs].data(*se);
    const std::span<const uint8_t> bb = dir->files()[fb].data(*be);
    const int64_t row_bytes = p.cols * bits / 8, n_groups = p.groups();
    const size_t width = p.dtype == DType::kF32 ? 4 : 2;
    if (static_cast<int64_t>(wb.size()) != p.rows * row_bytes ||
        static_cast<int64_t>(sb.size()) != n_groups * static_cast<int64_t>(width) ||
        bb.size() != sb.size())
      return err("{}: '{}' has stored sizes that do not match its shape and spec", student.path,
                 p.module);
    p.codes.resize(static_cast<size_t>(p.rows * p.cols));
    for (int64_t r = 0; r < p.rows; ++r)
      unpack_codes(wb.data() + r * row_bytes, 0, p.cols, bits, p.codes.data() + r * p.cols);
    p.s.resize(static_cast<size_t>(n_groups));
    p.b.resize(static_cast<size_t>(n_groups));
    for (int64_t g = 0; g < n_groups; ++g) {
      p.s[g] = load_float(p.dtype, sb.data() + g * width);
      p.b[g] = load_float(p.dtype, bb.data() + g * width);
    }
    p.unit.resize(p.s.size());
    for (size_t g = 0; g < p.s.size(); ++g) p.unit[g] = std::fabs(p.s[g]);
    for (auto* v : {&p.gs, &p.gb, &p.ms, &p.vs, &p.mb, &p.vb}) v->assign(p.s.size(), 0.0f);
    with_model_tensor(st, p.role, p.layer, [&](auto& field) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, std::vector<float>>)
        p.field = &field;
    });
    if (p.field == nullptr) return err("'{}': no matrix of the student holds it", p.module);
    params.push_back(std::move(p));
  }
  if (params.empty()) return err("{}: no affine-quantized matrix to train", student.path);

  // The norm weights stored as floats, when asked; the trained value is the loaded one.
  std::vector<NormParam> norms;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    const TensorRole r = s.kind->role;
    if (!o.train_norms ||
        (r != TensorRole::kNormAttn && r != TensorRole::kNormMlp && r != TensorRole::kNormFinal &&
         r != TensorRole::kQNorm && r != TensorRole::kKNorm))
      continue;
    const TensorInfo* info = student.tensors->find(s.name);
    if (info == nullptr || info->mlx_quant) continue;
    const DType dt = info->stored_dtype;
    if (dt != DType::kBF16 && dt != DType::kF16 && dt != DType::kF32) continue;
    NormParam p;
    p.name = s.name, p.role = r, p.layer = s.layer, p.dtype = dt;
    p.offset = s.kind->zero_centred ? 1.0f : 0.0f;
    with_model_tensor(st, r, s.layer, [&](auto& field) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, std::vector<float>>)
        p.field = &field;
    });
    if (p.field == nullptr || p.field->empty()) continue;
    p.w = *p.field;
    double mean = 0.0;
    for (float x : p.w) mean += std::fabs(x);
    mean /= static_cast<double>(p.w.size());
    p.unit.assign(p.w.size(), mean > 0.0 ? static_cast<float>(mean) : 1.0f);
    for (auto* v : {&p.g, &p.m, &p.v}) v->assign(p.w.size(), 0.0f);
    norms.push_back(std::move(p));
  }

  DistillResult res;
  res.tensors = static_cast<int64_t>(params.size());
  res.norms = static_cast<int64_t>(norms.size());
  for (const AffineParam& p : params) res.groups += p.groups();
  std::map<std::pair<int, int64_t>, AffineParam*> by_role;
  for (AffineParam& p : params) by_role[{static_cast<int>(p.role), p.layer}] = &p;
  std::map<std::pair<int, int64_t>, NormParam*> norm_by_role;
  for (NormParam& p : norms) norm_by_role[{static_cast<int>(p.role), p.layer}] = &p;
  auto key = [](TensorRole role, int64_t layer) {
    return std::pair{static_cast<int>(role), layer};
  };

  const int64_t n = calib.seq_len, vocab = cfg.vocab_size, d = cfg.hidden_size;
  const int64_t train_rows = calib.rows() - o.holdout_rows, S = o.seqs_per_step;
  ThreadPool pool;
  F32Backprop bp(cfg, inv_freq, &pool);
  std::vector<float> zt(static_cast<size_t>(S * n * vocab)), zs(zt.size());
  std::vector<float> x(static_cast<size_t>(S * n * d));
  F32Buffers tbuf;
  auto teacher_logits = [&](std::span<const int32_t> tokens, int64_t seqs) {
    tm->embed(tokens, x.data());
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) tm->layer(l, x.data(), n, seqs, tbuf);
    tm->head(x.data(), seqs * n, zt.data());
  };
  auto holdout_kl = [&]() {
    double sum = 0.0;
    for (int64_t h = 0; h < o.holdout_rows; ++h) {
      const std::span<const int32_t> row = calib.row(train_rows + h);
      teacher_logits(row, 1);
      bp.forward(st, row, n, 1, zs.data());
      sum += kl_and_grad(zt.data(), zs.data(), n, vocab, 1.0, nullptr, pool);
    }
    return o.holdout_rows > 0 ? sum / static_cast<double>(o.holdout_rows) : 0.0;
  };

  for (const AffineParam& p : params) dequantize_into(p, true, pool);
  res.holdout_before = holdout_kl();
  std::vector<int32_t> tokens(static_cast<size_t>(S * n));
  for (int64_t step = 1; step <= o.steps; ++step) {
    if (o.cancel != nullptr && o.cancel->load()) return err("distill: interrupted");
    const auto ts = clock::now();
    for (int64_t i = 0; i < S; ++i) {
      const std::span<const int32_t> row = calib.row(((step - 1) * S + i) % train_rows);
      std::copy(row.begin(), row.end(), tokens.begin() + i * n);
    }
    teacher_logits(tokens, S);
    bp.forward(st, tokens, n, S, zs.data());
    const double loss =
        kl_and_grad(zt.data(), zs.data(), S * n, vocab, o.temperature, zs.data(), pool);
    bp.backward(
        st, zs.data(),
        [&](TensorRole r, int64_t l) {
          return by_role.count(key(r, l)) > 0 || norm_by_role.count(key(r, l)) > 0;
        },
        [&](TensorRole r, int64_t l, const float* dw, int64_t, int64_t) {
          if (auto it = by_role.find(key(r, l)); it != by_role.end()) {
            accumulate_group_grads(*it->second, dw, pool);
          } else {
            NormParam& p = *norm_by_role.at(key(r, l));
            for (size_t i = 0; i < p.g.size(); ++i) p.g[i] += dw[i];
          }
        });
    // Linear warm-up over the first tenth of the steps, then a cosine decay to zero.
    const double warm = std::max<double>(1.0, 0.1 * static_cast<double>(o.steps));
    const double frac = static_cast<double>(step - 1) / static_cast<double>(o.steps);
    const double lr = o.lr * std::min(1.0, static_cast<double>(step) / warm) *
                      (o.schedule ? 0.5 * (1.0 + std::cos(std::numbers::pi * frac)) : 1.0);
    for (AffineParam& p : params) {
      adam_update(p, lr, step, pool);
      dequantize_into(p, o.round_each_step, pool);
    }
    for (NormParam& p : norms) adam_update(p, lr, step, o.round_each_step, pool);
    res.losses.push_back(loss);
    res.train_tokens += S * n;
    if (progress)
      progress({step, o.steps, loss, std::chrono::duration<double>(clock::now() - ts).count()});
  }
  for (const AffineParam& p : params) dequantize_into(p, true, pool);
  for (NormParam& p : norms)
    for (size_t i = 0; i < p.w.size(); ++i) (*p.field)[i] = stored_value(p.dtype, p.w[i]);
  res.holdout_after = holdout_kl();
  for (const AffineParam& p : params) {
    res.stored[p.module + ".scales"] = encode(p.dtype, p.s);
    res.stored[p.module + ".biases"] = encode(p.dtype, p.b);
  }
  for (NormParam& p : norms) {
    for (float& x : p.w) x -= p.offset;
    res.stored[p.name] = encode(p.dtype, p.w);
  }
  res.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return res;
}

nlohmann::json distill_record(const std::string& teacher, const std::string& student,
                              const DistillOptions& o, const CalibSet& calib,
                              const DistillResult& r) {
  return {{"teacher", teacher},
          {"student", student},
          {"steps", o.steps},
          {"rows_per_step", o.seqs_per_step},
          {"lr", o.lr},
          {"temperature", o.temperature},
          {"schedule", o.schedule ? "cosine" : "constant"},
          {"round_each_step", o.round_each_step},
          {"train_norms", o.train_norms},
          {"calib", calib.info()},
          {"holdout_rows", o.holdout_rows},
          {"holdout_kl_before", r.holdout_before},
          {"holdout_kl_after", r.holdout_after},
          {"tensors", r.tensors},
          {"groups", r.groups},
          {"norms", r.norms},
          {"train_tokens", r.train_tokens},
          {"seconds", r.seconds}};
}

}  // namespace tq
