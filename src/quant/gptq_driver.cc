#include "quant/gptq_driver.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/ops.h"
#include "model/layer.h"
#include "model/rope.h"
#include "model/tensor_table.h"
#include "quant/asym_target.h"

namespace tq {

namespace {

namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string module_path(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}

const QuantSpec* find_spec(const std::map<std::string, QuantSpec>& specs,
                           const std::string& weight_name) {
  auto it = specs.find(module_path(weight_name));
  if (it == specs.end()) it = specs.find(weight_name);
  return it == specs.end() ? nullptr : &it->second;
}

// The HF weight names of one layer's linear modules, by role.
std::map<TensorRole, std::string> linear_names(const ModelConfig& cfg, int64_t layer) {
  std::map<TensorRole, std::string> out;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (s.layer != layer) continue;
    switch (s.kind->role) {
      case TensorRole::kAttnQ:
      case TensorRole::kAttnK:
      case TensorRole::kAttnV:
      case TensorRole::kAttnO:
      case TensorRole::kMlpGate:
      case TensorRole::kMlpUp:
      case TensorRole::kMlpDown:
      case TensorRole::kLinQkv:
      case TensorRole::kLinZ:
      case TensorRole::kLinB:
      case TensorRole::kLinA:
      case TensorRole::kLinOut:
        out[s.kind->role] = s.name;
        break;
      default:
        break;
    }
  }
  return out;
}

constexpr int kTagHessian = 31, kTagCheckpoint = 32;

std::string acts_file(int64_t layer) { return "acts_" + std::to_string(layer) + ".bin"; }
std::string float_acts_file(int64_t layer) { return "facts_" + std::to_string(layer) + ".bin"; }
std::string modules_file(int64_t layer) { return "layer_" + std::to_string(layer) + ".tqc"; }

}  // namespace

Result<std::unique_ptr<GptqDriver>> GptqDriver::create(const ModelConfig& cfg,
                                                       const CalibSet& calib,
                                                       GptqDriverOptions options) {
  if (calib.rows() < 1) return err("gptq: no calibration rows");
  if (calib.seq_len < 1) return err("gptq: calibration sequence length {} < 1", calib.seq_len);
  TQ_CHECK_OK(check_geometry(cfg));
  std::unique_ptr<GptqDriver> d(new GptqDriver());
  d->cfg_ = cfg;
  TQ_TRY(d->inv_freq_, rope_inv_freq(cfg));
  d->opt_ = std::move(options);
  d->rows_ = calib.rows();
  d->seq_ = calib.seq_len;
  d->tokens_ = calib.tokens;
  if (d->opt_.hessian_row_block < 1) return err("gptq: Hessian row block must be positive");
  const int rank = d->opt_.comm ? d->opt_.comm->rank() : 0;
  const int size = d->opt_.comm ? d->opt_.comm->size() : 1;
  for (int64_t r = 0; r < d->rows_; ++r)
    if (BlockedHessian::owner(r, d->opt_.hessian_row_block, size) == rank) d->my_rows_.push_back(r);
  const auto mine = static_cast<int64_t>(d->my_rows_.size());
  const int64_t width = d->seq_ * cfg.hidden_size;
  const bool fits = mine * width * 4 <= d->opt_.max_calib_memory;
  TQ_TRY(d->x_, ActivationStore::create(mine, width, fits, d->opt_.scratch_dir));
  d->asym_ = d->opt_.gptq.asym && !d->opt_.probe;
  if (d->asym_) {
    if (size > 1) return err("gptq: --gptq-asym runs in one process only (not under mpirun)");
    TQ_TRY(d->xf_,
           ActivationStore::create(mine, width, 2 * mine * width * 4 <= d->opt_.max_calib_memory,
                                   d->opt_.scratch_dir));
  }
  d->summary_ = {{"modules", 0},           {"fallbacks", 0},         {"escalated", 0},
                 {"cholesky_failures", 0}, {"scale_divergences", 0}, {"loss_divergences", 0},
                 {"dead_columns", 0},      {"seconds", 0.0},         {"spilled", !fits}};
  if (!d->opt_.checkpoint_dir.empty()) TQ_CHECK_OK(d->load_checkpoint());
  return d;
}

Status GptqDriver::set_embedding(const FloatTensor& embed, const FloatTensor* float_embed) {
  const int64_t dd = cfg_.hidden_size;
  if (float_embed == nullptr) float_embed = &embed;
  for (const FloatTensor* e : {&embed, float_embed})
    if (e->shape.size() != 2 || e->shape[1] != dd || e->shape[0] != embed.shape[0] ||
        static_cast<int64_t>(e->data.size()) != e->shape[0] * dd)
      return err("gptq: embedding shape {} does not fit hidden size {}", shape_str(e->shape), dd);
  if (next_layer_ > 0) return ok_status();  // resumed: the inputs come from the checkpoint
  std::vector<float> row(static_cast<size_t>(seq_ * dd));
  auto lookup = [&](const FloatTensor& e, int64_t r) -> Status {
    for (int64_t i = 0; i < seq_; ++i) {
      const int32_t t = tokens_[r * seq_ + i];
      if (t < 0 || t >= e.shape[0])
        return err("gptq: calibration token {} outside the embedding's {} rows", t, e.shape[0]);
      std::copy_n(e.data.data() + t * dd, dd, row.data() + i * dd);
    }
    return ok_status();
  };
  for (size_t lr = 0; lr < my_rows_.size(); ++lr) {
    TQ_CHECK_OK(lookup(embed, my_rows_[lr]));
    TQ_CHECK_OK(x_.write_row(static_cast<int64_t>(lr), row));
    if (asym_) {
      TQ_CHECK_OK(lookup(*float_embed, my_rows_[lr]));
      TQ_CHECK_OK(xf_.write_row(static_cast<int64_t>(lr), row));
    }
  }
  have_input_ = true;
  return ok_status();
}

Result<GptqModule> GptqDriver::quantize_module(int64_t layer, const std::string& weight_name,
                                               const FloatTensor& w, const QuantSpec& spec,
                                               DType dtype, const std::vector<double>& h,
                                               std::vector<float>* dst) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  auto r = gptq_quantize(w.data, rows, cols, h, spec, dtype, opt_.gptq);
  if (!r.ok()) return err("{}: {}", weight_name, r.error().message);
  GptqResult& g = r.value();
  *dst = std::move(g.dequantized);  // the quantized upstream path for the next stages
  GptqModule m;
  m.name = module_path(weight_name);
  m.shape = w.shape;
  m.spec = spec;
  m.scale_dtype = spec.mode == QuantMode::kAffine ? dtype : DType::kU8;
  m.weight = std::move(g.weight);
  m.scales = std::move(g.scales);
  m.biases = std::move(g.biases);
  m.info = {{"method", g.fallback ? "rtn-fallback" : "gptq"},
            {"proxy_loss", g.proxy_loss},
            {"rtn_loss", g.rtn_loss},
            {"damp", g.damp},
            {"attempts", g.attempts},
            {"fallback", g.fallback},
            {"cholesky_failures", g.cholesky_failures},
            {"scale_divergences", g.scale_divergences},
            {"loss_divergences", g.loss_divergences},
            {"dead_columns", g.dead_columns},
            {"seconds", g.seconds}};
  if (opt_.gptq.refit) {
    m.info["sweep_loss"] = g.sweep_loss;  // before the grid refit
    m.info["refit_rows"] = g.refit_rows;
  }
  auto bump = [&](const char* k, int64_t v) { summary_[k] = summary_[k].get<int64_t>() + v; };
  bump("modules", 1);
  bump("fallbacks", g.fallback);
  bump("escalated", g.attempts > 1);
  bump("cholesky_failures", g.cholesky_failures);
  bump("scale_divergences", g.scale_divergences);
  bump("loss_divergences", g.loss_divergences);
  bump("dead_columns", g.dead_columns);
  if (opt_.progress) {
    GptqProgress p;
    p.layer = layer;
    p.layers = cfg_.num_hidden_layers;
    p.module = m.name;
    p.result = &g;
    const double in_layer = now_s() - layer_t0_;
    p.elapsed_s = seconds_ + in_layer;
    const int64_t done = next_layer_;  // seconds_ covers every finished layer, resumed ones too
    if (done > 0)
      p.eta_s = std::max(0.0, seconds_ / static_cast<double>(done) *
                                      static_cast<double>(cfg_.num_hidden_layers - layer) -
                                  in_layer);
    opt_.progress(p);
  }
  return m;
}

Result<std::vector<GptqModule>> GptqDriver::quantize_layer(
    int64_t layer, const std::map<std::string, FloatTensor>& tensors,
    const std::map<std::string, QuantSpec>& specs, DType dtype) {
  if (layer < next_layer_) {
    if (opt_.checkpoint_dir.empty()) return err("gptq: layer {} was already quantized", layer);
    if (!root()) return std::vector<GptqModule>();
    return read_modules_file((fs::path(opt_.checkpoint_dir) / modules_file(layer)).string());
  }
  if (layer != next_layer_)
    return err("gptq: layer {} requested, layer {} comes next (layers go in order)", layer,
               next_layer_);
  if (!have_input_) return err("gptq: layer {} has no input activations (set_embedding)", layer);
  const double t0 = layer_t0_ = now_s();
  // The layer as f32 (quantized modules are written back as they are done, so the stages
  // after them see the quantized path), and its stages called one by one in GPTQ's
  // true-sequential order.
  F32Layer lw;
  TQ_CHECK_OK(load_layer_tensors(
      cfg_, layer, lw, [&](const TensorSpec& s, std::vector<float>& dst) -> Status {
        auto it = tensors.find(s.name);
        if (it == tensors.end()) return err("layer {}: tensor '{}' missing", layer, s.name);
        if (it->second.shape != s.shape ||
            static_cast<int64_t>(it->second.data.size()) != shape_numel(s.shape))
          return err("layer {}: tensor '{}' has shape {}, the config implies {}", layer, s.name,
                     shape_str(it->second.shape), shape_str(s.shape));
        dst = it->second.data;
        return ok_status();
      }));
  const F32Step step(cfg_);
  F32Buffers buffers;
  const auto names = linear_names(cfg_, layer);
  const int64_t dd = cfg_.hidden_size, qd = cfg_.num_attention_heads * cfg_.head_dim;
  const int64_t inter = cfg_.intermediate_size;
  std::vector<GptqModule> out;

  // Quantizes the modules of `roles` that have a spec, all with the Hessian in `acc`: on rank
  // 0, whose dequantized weights every rank then runs.
  const bool probing = opt_.probe && opt_.probe_layers.count(layer) > 0;
  auto quantize_group = [&](const std::vector<TensorRole>& roles, BlockedHessian& acc,
                            const CrossAccumulator* cross = nullptr) -> Status {
    std::vector<double> h, delta;  // delta: asym's Δ, once for the group
    bool have_h = false;
    if (probing) {
      TQ_TRY(h, acc.hessian());
      have_h = true;
      if (root())
        for (TensorRole role : roles) {
          const std::string& name = names.at(role);
          TQ_CHECK_OK(opt_.probe(layer, name, tensors.at(name), h));
        }
    }
    for (TensorRole role : roles) {
      const std::string& name = names.at(role);
      const QuantSpec* spec = find_spec(specs, name);
      if (spec == nullptr) continue;
      if (!have_h) {
        TQ_TRY(h, acc.hessian());
        have_h = true;
      }
      std::vector<float>* dst = nullptr;
      with_layer_tensor(lw, role, [&](std::vector<float>& v) { dst = &v; });
      if (root()) {
        const FloatTensor& w = tensors.at(name);
        FloatTensor target;
        if (asym_ && cross != nullptr && cross->samples() > 0) {
          if (delta.empty()) delta = cross->delta();
          target.shape = w.shape;
          auto t = asym_target(w.data, w.shape[0], w.shape[1], delta, h, opt_.gptq.damp);
          if (!t.ok()) return err("{}: {}", name, t.error().message);
          target.data = std::move(t.value());
        }
        TQ_TRY(GptqModule m, quantize_module(layer, name, target.data.empty() ? w : target, *spec,
                                             dtype, h, dst));
        out.push_back(std::move(m));
      }
      if (opt_.comm && opt_.comm->size() > 1) TQ_CHECK_OK(broadcast_values(*opt_.comm, 0, dst));
    }
    return ok_status();
  };
  auto blocked = [&](int64_t cols, int tag) {
    return BlockedHessian(cols, opt_.hessian, opt_.hessian_row_block, rows_, opt_.comm, tag);
  };
  const auto n_mine = static_cast<int64_t>(my_rows_.size());
  auto wanted = [&](const std::vector<TensorRole>& roles) {
    if (probing) return true;
    for (TensorRole role : roles)
      if (find_spec(specs, names.at(role)) != nullptr) return true;
    return false;
  };
  // The mixer's projections by layer kind: a Gated DeltaNet layer's in_proj_qkv/z/b/a read the
  // normed residual as q/k/v do, and out_proj takes o_proj's place.
  using R = TensorRole;
  const bool lin = lw.linear;
  const std::vector<TensorRole> in_roles =
      lin ? std::vector<TensorRole>{R::kLinQkv, R::kLinZ, R::kLinB, R::kLinA}
          : std::vector<TensorRole>{R::kAttnQ, R::kAttnK, R::kAttnV};
  const TensorRole out_role = lin ? R::kLinOut : R::kAttnO;
  const int64_t out_in = lin ? cfg_.linear_value_dim() : qd;  // out projection's input width
  // attn_out reads only the attention output (stored between the stages) unless it also gates
  // it (qwen3_5: the output gate, the DeltaNet's z); then the mixer is run again instead.
  const bool store_att = !lin && !cfg_.attn_output_gate();
  auto in_memory = [&](int64_t width) {
    return (x_.spilled() ? 0 : x_.bytes()) + x_.rows() * width * 4 <= opt_.max_calib_memory;
  };

  std::vector<float> xb(static_cast<size_t>(seq_ * dd));
  // Asym: the float layer on the float stream first, keeping each stage's float input.
  ActivationStore f_in, f_out, f_gu, f_down;
  std::vector<float> fb;  // one row of a float stage input
  if (asym_) {
    auto store = [&](ActivationStore* s, int64_t width) -> Status {
      TQ_TRY(*s, ActivationStore::create(n_mine, width, in_memory(width), opt_.scratch_dir));
      return ok_status();
    };
    TQ_CHECK_OK(store(&f_in, seq_ * dd));
    TQ_CHECK_OK(store(&f_out, seq_ * out_in));
    TQ_CHECK_OK(store(&f_gu, seq_ * dd));
    TQ_CHECK_OK(store(&f_down, seq_ * inter));
    const F32Layer lf = lw;  // no weight replaced yet
    F32Buffers fbuf;
    std::vector<float> xf(xb.size());
    F32Io fio = fbuf.bind(cfg_, inv_freq_, xf.data(), seq_);
    int64_t row = 0;
    Status st = ok_status();
    const LinearTap keep = [&](TensorRole role, const float* x, int64_t rows, int64_t cols) {
      const std::span<const float> v(x, static_cast<size_t>(rows * cols));
      if (!st.ok()) return;
      if (role == in_roles.front()) st = f_in.write_row(row, v);
      if (role == out_role) st = f_out.write_row(row, v);
      if (role == TensorRole::kMlpGate) st = f_gu.write_row(row, v);
      if (role == TensorRole::kMlpDown) st = f_down.write_row(row, v);
    };
    fio.tap = &keep;
    for (row = 0; row < n_mine; ++row) {
      TQ_CHECK_OK(xf_.read_row(row, xf));
      step.run(lf, fio);
      TQ_CHECK_OK(st);
      TQ_CHECK_OK(xf_.write_row(row, xf));
    }
  }
  // Adds the stage's Δ for row r: its float input from `fs`, the quantized one q.
  auto add_cross = [&](CrossAccumulator& c, const ActivationStore& fs, int64_t r,
                       std::span<const float> q) -> Status {
    if (!asym_) return ok_status();
    fb.resize(q.size());
    TQ_CHECK_OK(fs.read_row(r, fb));
    return c.add(fb, q, seq_);
  };
  F32Io io = buffers.bind(cfg_, inv_freq_, xb.data(), seq_);
  const std::span<const float> h(io.h, static_cast<size_t>(seq_ * dd));
  {  // A: q/k/v (DeltaNet: in_proj_qkv/z/b/a)
    BlockedHessian acc = blocked(dd, kTagHessian);
    CrossAccumulator cross(dd);
    if (wanted(in_roles)) {
      for (int64_t r = 0; r < n_mine; ++r) {
        TQ_CHECK_OK(x_.read_row(r, xb));
        step.attn_norm(lw, io);
        TQ_CHECK_OK(acc.add_row(my_rows_[r], h, seq_));
        TQ_CHECK_OK(add_cross(cross, f_in, r, h));
      }
    }
    TQ_CHECK_OK(quantize_group(in_roles, acc, &cross));
  }
  {  // B: o_proj (out_proj) after the quantized mixer inputs; C: residual, gate/up
    const int64_t att_width = store_att ? seq_ * out_in : 0;
    TQ_TRY(ActivationStore atts,
           ActivationStore::create(n_mine, att_width, in_memory(att_width), opt_.scratch_dir));
    std::vector<float> att(static_cast<size_t>(seq_ * std::max(out_in, qd)));
    std::vector<float> x_scratch(xb.size());
    io.att = att.data();
    BlockedHessian acc_o = blocked(out_in, kTagHessian);
    CrossAccumulator cross_o(out_in);
    const bool want_o = wanted({out_role});
    Status tapped = ok_status();
    int64_t tap_row = 0;
    // The out projection's input as attn_out forms it (gated where the family gates).
    const LinearTap tap = [&](TensorRole role, const float* x, int64_t rows, int64_t cols) {
      if (role != out_role || !tapped.ok()) return;
      const std::span<const float> v(x, static_cast<size_t>(rows * cols));
      tapped = acc_o.add_row(my_rows_[tap_row], v, seq_);
      if (tapped.ok()) tapped = add_cross(cross_o, f_out, tap_row, v);
    };
    for (int64_t r = 0; r < n_mine; ++r) {
      TQ_CHECK_OK(x_.read_row(r, xb));
      step.attn_norm(lw, io);
      step.qkv(lw, io);
      step.attn_core(lw, io);
      if (store_att) {
        const std::span<const float> a(att.data(), static_cast<size_t>(seq_ * out_in));
        if (want_o) {
          TQ_CHECK_OK(acc_o.add_row(my_rows_[r], a, seq_));
          TQ_CHECK_OK(add_cross(cross_o, f_out, r, a));
        }
        TQ_CHECK_OK(atts.write_row(
            r, std::span<const float>(att.data(), static_cast<size_t>(seq_ * out_in))));
      } else if (want_o) {
        std::copy(xb.begin(), xb.end(), x_scratch.begin());
        io.x = x_scratch.data();
        io.tap = &tap;
        tap_row = r;
        step.attn_out(lw, io);
        io.tap = nullptr;
        io.x = xb.data();
        TQ_CHECK_OK(tapped);
      }
    }
    TQ_CHECK_OK(quantize_group({out_role}, acc_o, &cross_o));
    BlockedHessian acc_gu = blocked(dd, kTagHessian);
    CrossAccumulator cross_gu(dd);
    const bool want_gu = wanted({TensorRole::kMlpGate, TensorRole::kMlpUp});
    for (int64_t r = 0; r < n_mine; ++r) {
      TQ_CHECK_OK(x_.read_row(r, xb));
      if (store_att) {
        TQ_CHECK_OK(
            atts.read_row(r, std::span<float>(att.data(), static_cast<size_t>(seq_ * out_in))));
      } else {
        step.attn_norm(lw, io);
        step.qkv(lw, io);
        step.attn_core(lw, io);
      }
      step.attn_out(lw, io);
      TQ_CHECK_OK(x_.write_row(r, xb));  // x now holds x_mid
      if (want_gu) {
        step.mlp_norm(lw, io);
        TQ_CHECK_OK(acc_gu.add_row(my_rows_[r], h, seq_));
        TQ_CHECK_OK(add_cross(cross_gu, f_gu, r, h));
      }
    }
    TQ_CHECK_OK(quantize_group({TensorRole::kMlpGate, TensorRole::kMlpUp}, acc_gu, &cross_gu));
  }
  {  // D: down_proj after the quantized gate/up; E: the next layer's input
    TQ_TRY(
        ActivationStore acts,
        ActivationStore::create(n_mine, seq_ * inter, in_memory(seq_ * inter), opt_.scratch_dir));
    std::vector<float> act(static_cast<size_t>(seq_ * inter));
    io.gate = act.data();
    BlockedHessian acc_d = blocked(inter, kTagHessian);
    CrossAccumulator cross_d(inter);
    const bool want_d = wanted({TensorRole::kMlpDown});
    for (int64_t r = 0; r < n_mine; ++r) {
      TQ_CHECK_OK(x_.read_row(r, xb));
      step.mlp_norm(lw, io);
      step.mlp_act(lw, io);
      if (want_d) {
        TQ_CHECK_OK(acc_d.add_row(my_rows_[r], act, seq_));
        TQ_CHECK_OK(add_cross(cross_d, f_down, r, act));
      }
      TQ_CHECK_OK(acts.write_row(r, act));
    }
    TQ_CHECK_OK(quantize_group({TensorRole::kMlpDown}, acc_d, &cross_d));
    for (int64_t r = 0; r < n_mine; ++r) {
      TQ_CHECK_OK(x_.read_row(r, xb));
      TQ_CHECK_OK(acts.read_row(r, act));
      step.mlp_out(lw, io);
      TQ_CHECK_OK(x_.write_row(r, xb));
    }
  }
  next_layer_ = layer + 1;
  seconds_ += now_s() - t0;
  summary_["seconds"] = seconds_;
  if (!opt_.checkpoint_dir.empty()) TQ_CHECK_OK(save_checkpoint(layer, out));
  return out;
}

Result<std::vector<double>> GptqDriver::head_hessian(std::span<const float> norm_weight,
                                                     std::vector<double>* delta) {
  const int64_t dd = cfg_.hidden_size;
  if (next_layer_ != cfg_.num_hidden_layers || !have_input_)
    return err("gptq: the head needs every layer done first ({} of {})", next_layer_,
               cfg_.num_hidden_layers);
  if (static_cast<int64_t>(norm_weight.size()) != dd)
    return err("gptq: final norm has {} values, hidden size {}", norm_weight.size(), dd);
  BlockedHessian acc(dd, opt_.hessian, opt_.hessian_row_block, rows_, opt_.comm, kTagHessian);
  CrossAccumulator cross(dd);
  const bool want_delta = asym_ && delta != nullptr;
  std::vector<float> xb(static_cast<size_t>(seq_ * dd)), h(xb.size()),
      hf(want_delta ? h.size() : 0);
  const auto eps = static_cast<float>(cfg_.rms_norm_eps);
  for (size_t r = 0; r < my_rows_.size(); ++r) {
    TQ_CHECK_OK(x_.read_row(static_cast<int64_t>(r), xb));
    rms_norm(xb.data(), norm_weight.data(), seq_, dd, eps, h.data());
    TQ_CHECK_OK(acc.add_row(my_rows_[r], h, seq_));
    if (want_delta) {
      TQ_CHECK_OK(xf_.read_row(static_cast<int64_t>(r), xb));
      rms_norm(xb.data(), norm_weight.data(), seq_, dd, eps, hf.data());
      TQ_CHECK_OK(cross.add(hf, h, seq_));
    }
  }
  if (want_delta) *delta = cross.delta();
  return acc.hessian();
}

Result<GptqModule> GptqDriver::quantize_head(const std::string& weight_name, const FloatTensor& w,
                                             std::span<const float> norm_weight,
                                             const QuantSpec& spec, DType dtype, double ridge) {
  layer_t0_ = now_s();
  std::vector<double> delta;
  TQ_TRY(std::vector<double> h, head_hessian(norm_weight, &delta));
  if (!root()) return GptqModule{};
  add_ridge(h, w.shape[1], ridge);
  FloatTensor target;
  if (!delta.empty()) {  // asym (a tied head too: measured slightly better than without)
    target.shape = w.shape;
    auto t = asym_target(w.data, w.shape[0], w.shape[1], delta, h, opt_.gptq.damp);
    if (!t.ok()) return err("{}: {}", weight_name, t.error().message);
    target.data = std::move(t.value());
  }
  std::vector<float> unused;
  TQ_TRY(GptqModule m, quantize_module(cfg_.num_hidden_layers - 1, weight_name,
                                       target.data.empty() ? w : target, spec, dtype, h, &unused));
  seconds_ += now_s() - layer_t0_;
  summary_["seconds"] = seconds_;
  return m;
}

Status GptqDriver::save_checkpoint(int64_t layer, const std::vector<GptqModule>& mods) {
  std::vector<float> row(static_cast<size_t>(x_.width()));
  if (!root()) {  // this rank's rows of the next layer's input go to rank 0, which writes them
    for (int64_t r = 0; r < x_.rows(); ++r) {
      TQ_CHECK_OK(x_.read_row(r, row));
      TQ_CHECK_OK(send_large(*opt_.comm, 0, kTagCheckpoint, std::span<const float>(row)));
    }
    return ok_status();
  }
  const fs::path dir(opt_.checkpoint_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return err("{}: cannot create checkpoint directory: {}", dir.string(), ec.message());
  TQ_CHECK_OK(write_modules_file((dir / modules_file(layer)).string(), mods));
  // The next layer's input under its own name, then the state that points at it: a kill
  // between the steps leaves the previous state valid.
  const fs::path acts = dir / acts_file(layer + 1), tmp = dir / (acts_file(layer + 1) + ".tmp");
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return err("{}: cannot write checkpoint", tmp.string());
    const int size = opt_.comm ? opt_.comm->size() : 1;
    for (int64_t r = 0, mine = 0; r < rows_; ++r) {  // global row order
      const int owner = BlockedHessian::owner(r, opt_.hessian_row_block, size);
      if (owner == 0) {
        TQ_CHECK_OK(x_.read_row(mine++, row));
      } else {
        TQ_CHECK_OK(recv_large(*opt_.comm, owner, kTagCheckpoint, std::span<float>(row)));
      }
      f.write(reinterpret_cast<const char*>(row.data()),
              static_cast<std::streamsize>(row.size() * 4));
    }
    if (!f.flush()) return err("{}: write failed", tmp.string());
  }
  fs::rename(tmp, acts, ec);
  if (ec) return err("{}: {}", acts.string(), ec.message());
  if (asym_) {  // one process: the float stream's rows in order
    const fs::path facts = dir / float_acts_file(layer + 1),
                   ftmp = dir / (float_acts_file(layer + 1) + ".tmp");
    {
      std::ofstream f(ftmp, std::ios::binary | std::ios::trunc);
      if (!f) return err("{}: cannot write checkpoint", ftmp.string());
      for (int64_t r = 0; r < xf_.rows(); ++r) {
        TQ_CHECK_OK(xf_.read_row(r, row));
        f.write(reinterpret_cast<const char*>(row.data()),
                static_cast<std::streamsize>(row.size() * 4));
      }
      if (!f.flush()) return err("{}: write failed", ftmp.string());
    }
    fs::rename(ftmp, facts, ec);
    if (ec) return err("{}: {}", facts.string(), ec.message());
  }
  nlohmann::json state = {
      {"fingerprint", opt_.fingerprint}, {"next_layer", layer + 1}, {"rows", rows_}, {"seq", seq_},
      {"hidden", cfg_.hidden_size},      {"summary", summary_}};
  {
    std::ofstream f(dir / "state.json.tmp", std::ios::trunc);
    f << state.dump(1);
    if (!f.flush()) return err("{}: write failed", (dir / "state.json.tmp").string());
  }
  fs::rename(dir / "state.json.tmp", dir / "state.json", ec);
  if (ec) return err("{}: {}", (dir / "state.json").string(), ec.message());
  fs::remove(dir / acts_file(layer), ec);  // the previous layer's input is no longer needed
  fs::remove(dir / float_acts_file(layer), ec);
  return ok_status();
}

Status GptqDriver::load_checkpoint() {
  // Rank 0 reads the checkpoint; every rank first learns whether there is one and where it
  // stands, then rank 0 sends each the rows it runs.
  std::vector<int64_t> next = {-1};
  if (root()) TQ_CHECK_OK(read_checkpoint(&next[0]));
  if (opt_.comm && opt_.comm->size() > 1) TQ_CHECK_OK(broadcast_values(*opt_.comm, 0, &next));
  if (next[0] < 0) return ok_status();
  std::vector<float> row(static_cast<size_t>(x_.width()));
  if (!root()) {
    for (int64_t r = 0; r < x_.rows(); ++r) {
      TQ_CHECK_OK(recv_large(*opt_.comm, 0, kTagCheckpoint, std::span<float>(row)));
      TQ_CHECK_OK(x_.write_row(r, row));
    }
  } else {
    const fs::path acts = fs::path(opt_.checkpoint_dir) / acts_file(next[0]);
    std::ifstream a(acts, std::ios::binary);
    const int size = opt_.comm ? opt_.comm->size() : 1;
    for (int64_t r = 0, mine = 0; r < rows_; ++r) {  // global row order, each to its rank
      if (!a.read(reinterpret_cast<char*>(row.data()),
                  static_cast<std::streamsize>(row.size() * 4)))
        return err("{}: checkpoint activations truncated", acts.string());
      const int owner = BlockedHessian::owner(r, opt_.hessian_row_block, size);
      if (owner == 0) {
        TQ_CHECK_OK(x_.write_row(mine++, row));
      } else {
        TQ_CHECK_OK(send_large(*opt_.comm, owner, kTagCheckpoint, std::span<const float>(row)));
      }
    }
  }
  if (asym_) TQ_CHECK_OK(read_float_stream(next[0]));
  next_layer_ = resumed_layers_ = next[0];
  have_input_ = true;
  return ok_status();
}

Status GptqDriver::read_float_stream(int64_t next_layer) {
  const fs::path facts = fs::path(opt_.checkpoint_dir) / float_acts_file(next_layer);
  std::ifstream a(facts, std::ios::binary);
  if (!a) return err("{}: checkpoint float activations missing", facts.string());
  std::vector<float> row(static_cast<size_t>(xf_.width()));
  for (int64_t r = 0; r < xf_.rows(); ++r) {
    if (!a.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(row.size() * 4)))
      return err("{}: checkpoint float activations truncated", facts.string());
    TQ_CHECK_OK(xf_.write_row(r, row));
  }
  return ok_status();
}

Status GptqDriver::read_checkpoint(int64_t* next_layer) {
  const fs::path dir(opt_.checkpoint_dir), state_path = dir / "state.json";
  std::ifstream f(state_path);
  if (!f) return ok_status();  // nothing to resume
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json state = nlohmann::json::parse(ss.str(), nullptr, false);
  if (state.is_discarded() || !state.is_object())
    return err("{}: checkpoint state is not valid JSON", state_path.string());
  try {
    if (state.at("fingerprint").get<std::string>() != opt_.fingerprint)
      return err(
          "{}: checkpoint was made from another source, options or calibration set; "
          "remove it or start without --resume",
          state_path.string());
    const int64_t next = state.at("next_layer").get<int64_t>();
    if (state.at("rows").get<int64_t>() != rows_ || state.at("seq").get<int64_t>() != seq_ ||
        state.at("hidden").get<int64_t>() != cfg_.hidden_size || next < 0 ||
        next > cfg_.num_hidden_layers)
      return err("{}: checkpoint geometry does not match", state_path.string());
    if (state.contains("summary")) summary_ = state["summary"];
    summary_["spilled"] = x_.spilled();
    const fs::path acts = dir / acts_file(next);
    std::ifstream a(acts, std::ios::binary);
    if (!a) return err("{}: checkpoint activations missing", acts.string());
    *next_layer = next;
    seconds_ = summary_.value("seconds", 0.0);
  } catch (const nlohmann::json::exception& e) {
    return err("{}: bad checkpoint state: {}", state_path.string(), e.what());
  }
  return ok_status();
}

}  // namespace tq
