#include "rotate/fold_apply.h"

#include <algorithm>
#include <cstring>

namespace tq {

namespace {

// The name of a global tensor in the fold's (output) layout.
std::string global_name(Family f, TensorRole role) {
  for (const TensorKind& k : family_table(f))
    if (k.role == role && !k.per_layer()) return tensor_name(k, -1);
  return std::string(tensor_role_name(role));
}

bool sets_ones(const TensorFold& f) {
  return std::any_of(f.steps.begin(), f.steps.end(),
                     [](const FoldStep& s) { return s.op == FoldOp::kSetOnes; });
}

// Runs the steps of one tensor in T (f32 or f64) on x [rows, cols] (vectors: [n, 1]).
template <typename T>
Status run_steps(const TensorFold& f, const std::string& name, T* x, int64_t rows, int64_t cols,
                 int64_t layer, const TensorMap& t, const Rotation& r1, const Rotation* r2,
                 const ModelConfig& cfg) {
  const int64_t h = cfg.head_dim;
  for (const FoldStep& s : f.steps) {
    switch (s.op) {
      case FoldOp::kCloneEmbed:
      case FoldOp::kSetOnes:
        break;  // done by the caller
      case FoldOp::kGammaCols: {
        // One norm over the input, or two over its halves ([embedding | hidden] of the MTP fc).
        std::vector<float> g;
        const int64_t parts = s.norm_hi != nullptr ? 2 : 1, width = cols / parts;
        for (const TensorKind* norm : {s.norm, s.norm_hi}) {
          if (norm == nullptr) continue;
          const std::string gname = tensor_name(*norm, layer);
          auto it = t.find(gname);
          if (it == t.end()) return err("{}: gamma-fold needs {}, which is missing", name, gname);
          if (it->second.shape != Shape{width} || width * parts != cols)
            return err("{}: gamma-fold: {} has shape {}, expected [{}]", name, gname,
                       shape_str(it->second.shape), width);
          g.insert(g.end(), it->second.data.begin(), it->second.data.end());
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) x[r * cols + c] *= static_cast<T>(g[c]);
        break;
      }
      case FoldOp::kR1Right:  // each row is cols / n residual vectors (one, or the fc's two)
        if (cols % r1.n != 0) return err("{}: {} columns are not residual blocks", name, cols);
        rotate_rows(r1, x, rows * (cols / r1.n));
        break;
      case FoldOp::kR1LeftT:
        rotate_cols_t(r1, x, cols, cols);
        break;
      case FoldOp::kR2LeftT:  // rows [n_kv·h]: one R2ᵀ per kv-head block
        for (int64_t m = 0; m < rows / h; ++m) rotate_cols_t(*r2, x + m * h * cols, cols, cols);
        break;
      case FoldOp::kR2Right:  // each row is n_heads contiguous head vectors of length h
        rotate_rows(*r2, x, rows * (cols / h));
        break;
    }
  }
  return ok_status();
}

nlohmann::json spec_json(const RotationSpec& s) {
  nlohmann::json j = {{"kind", rotation_kind_name(s.kind)}, {"n", s.n}};
  if (s.kind == RotationKind::kHadamard) {
    j["K"] = s.k;
    j["m"] = s.m;
    j["construction"] = s.construction;
  }
  return j;
}

std::string hk_rows_json_safe(const HadamardMatrix& hk, int64_t i) {
  std::string row;
  for (int64_t j = 0; j < hk.k; ++j) row.push_back(hk.at(i, j) < 0 ? '-' : '+');
  return row;
}

// Appends a tensor entry to a safetensors header/data pair (data laid out in name order).
void append_f64(nlohmann::json& header, std::string& data, const std::string& name, int64_t n,
                const std::vector<double>& q) {
  const size_t begin = data.size();
  data.append(reinterpret_cast<const char*>(q.data()), q.size() * sizeof(double));
  header[name] = {{"dtype", "F64"}, {"shape", {n, n}}, {"data_offsets", {begin, data.size()}}};
}

}  // namespace

Result<Folder> Folder::create(FoldPlan plan) {
  Folder f(std::move(plan));
  if (f.plan_.r1.kind != RotationKind::kNone) {
    TQ_TRY(f.r1_, f.plan_.make_r1());
  }
  return f;
}

Status Folder::apply(const TensorFold& f, int64_t layer, TensorMap& t, const Rotation* r2) const {
  const std::string name = tensor_name(*f.kind, layer);
  auto it = t.find(name);
  if (it == t.end()) return err("{}: missing (the rotation fold needs it)", name);
  FloatTensor& x = it->second;
  const Shape want = tensor_shape(*f.kind, plan_.config);
  if (x.shape != want || x.data.size() != static_cast<size_t>(shape_numel(want)))
    return err("{}: shape {}, expected {}", name, shape_str(x.shape), shape_str(want));
  if (sets_ones(f)) {
    std::fill(x.data.begin(), x.data.end(), 1.0f);
    return ok_status();
  }
  const int64_t rows = want[0], cols = want.size() == 2 ? want[1] : 1;
  if (plan_.options.fold_dtype == FoldDType::kF32)
    return run_steps(f, name, x.data.data(), rows, cols, layer, t, r1_, r2, plan_.config);
  std::vector<double> d(x.data.begin(), x.data.end());
  TQ_CHECK_OK(run_steps(f, name, d.data(), rows, cols, layer, t, r1_, r2, plan_.config));
  std::transform(d.begin(), d.end(), x.data.begin(),
                 [](double v) { return static_cast<float>(v); });
  return ok_status();
}

Status Folder::apply_globals(TensorMap& t) const {
  if (plan_.untie) {
    const std::string embed = global_name(plan_.config.family, TensorRole::kEmbed);
    auto e = t.find(embed);
    if (e == t.end()) return err("{}: missing (untie needs it)", embed);
    t[global_name(plan_.config.family, TensorRole::kLmHead)] = e->second;
  }
  // Gains are read by the γ-folds first and set to ones afterwards.
  for (const auto& f : plan_.globals)
    if (!sets_ones(f)) TQ_CHECK_OK(apply(f, -1, t, nullptr));
  for (const auto& f : plan_.globals)
    if (sets_ones(f)) TQ_CHECK_OK(apply(f, -1, t, nullptr));
  return ok_status();
}

Status Folder::apply_layer(int64_t layer, TensorMap& t) const {
  if (layer < 0 || layer >= plan_.config.num_hidden_layers)
    return err("layer {}: outside 0..{}", layer, plan_.config.num_hidden_layers - 1);
  Rotation r2;
  if (plan_.r2.kind != RotationKind::kNone) {
    TQ_TRY(r2, plan_.make_r2(layer));
  }
  for (const auto& f : plan_.layer)
    if (!sets_ones(f) && tensor_present(*f.kind, plan_.config, layer))
      TQ_CHECK_OK(apply(f, layer, t, &r2));
  for (const auto& f : plan_.layer)
    if (sets_ones(f) && tensor_present(*f.kind, plan_.config, layer))
      TQ_CHECK_OK(apply(f, layer, t, &r2));
  return ok_status();
}

nlohmann::json Folder::metadata() const {
  const FoldPlan& p = plan_;
  nlohmann::json steps = nlohmann::json::array();
  if (p.untie) steps.push_back("untie");
  if (p.r1.kind != RotationKind::kNone) {
    steps.push_back("gamma_fold");
    steps.push_back("r1");
  }
  if (p.r2.kind != RotationKind::kNone) steps.push_back("r2");
  nlohmann::json j = {
      {"transform", "rotation_fold"},
      {"version", 1},
      {"family", family_name(p.config.family)},
      {"seed", p.options.seed},
      {"fold_dtype", p.options.fold_dtype == FoldDType::kF64 ? "f64" : "f32"},
      {"steps", steps},
      {"untie", p.untie},
      {"notes", p.notes},
      {"deviations",
       {"no embedding mean-centring (exact for RMSNorm)", "no R3/R4 online rotations",
        "norm modules and eps kept, gains set to ones",
        "SpinQuant R2 (per-head v/o), not QuaRot's cross-head Hadamard"}},
  };
  nlohmann::json r1 = spec_json(p.r1);
  if (p.r1.kind != RotationKind::kNone) {
    r1["stream_seed"] = r1_.stream_seed;
    if (p.r1.kind == RotationKind::kHadamard) r1["signs"] = r1_.signs_string();
  }
  j["r1"] = r1;
  nlohmann::json r2 = spec_json(p.r2);
  if (p.r2.kind != RotationKind::kNone) {
    nlohmann::json layers = nlohmann::json::array();
    for (int64_t l = 0; l < p.config.num_hidden_layers; ++l) {
      nlohmann::json e = {{"layer", l},
                          {"stream_seed", stream_seed(p.options.seed, 1 + uint64_t(l))}};
      if (p.r2.kind == RotationKind::kHadamard) {
        auto r = p.make_r2(l);
        if (r.ok()) e["signs"] = r->signs_string();
      }
      layers.push_back(e);
    }
    r2["layers"] = layers;
  }
  j["r2"] = r2;
  return j;
}

nlohmann::json Folder::rotation_json() const {
  nlohmann::json j = metadata();
  j["format"] = "turboquant rotation.json v1";
  j["convention"] = {
      "W is [out, in]; y = x·Wᵀ; the residual stream h becomes h·R1",
      "embed_tokens, q/k/v_proj, gate/up_proj, lm_head: W <- W·R1 (after W <- W·diag(gamma))",
      "o_proj, down_proj and their biases: W <- R1ᵀ·W",
      "v_proj rows and bias of kv head m: W_m <- R2ᵀ·W_m; o_proj columns of head n: W_n <- W_n·R2",
  };
  j["hadamard"] = {
      "Q = diag(signs)·(H_K ⊗ H_{2^m})/sqrt(n), Kronecker index i = a·2^m + b (a < K)",
      "H_{2^m}[i][j] = (-1)^popcount(i & j) (Sylvester, natural order)",
      "signs[i] = -1 if the top bit of the i-th mt19937_64 output is set, else +1",
  };
  j["random"] = {
      "G [n, n] row-major: Box-Muller Gaussians from mt19937_64(stream_seed): u = ((x >> 11) + "
      "1)·2^-53, pairs sqrt(-2 ln u1)·(cos, sin)(2π u2), cos first",
      "Q, R = QR(G) (LAPACK dgeqrf + dorgqr); Q <- Q·diag(sign(diag R)) (sign 0 -> +1)",
      "bits of Q depend on the LAPACK build: --save-rotations stores the matrices",
  };
  j["stream_seed"] =
      "splitmix64(seed + (stream + 1)·0x9E3779B97F4A7C15); stream 0 = R1, 1 + layer = R2";
  if (plan_.r1.kind == RotationKind::kHadamard && r1_.hk.k > 1) {
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t i = 0; i < r1_.hk.k; ++i) rows.push_back(hk_rows_json_safe(r1_.hk, i));
    j["r1"]["H_K"] = rows;
  }
  return j;
}

Result<std::string> Folder::rotations_safetensors() const {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  std::map<std::string, std::pair<int64_t, std::vector<double>>> mats;  // name order
  if (plan_.r1.kind != RotationKind::kNone) mats["r1"] = {r1_.n, rotation_matrix(r1_)};
  if (plan_.r2.kind != RotationKind::kNone)
    for (int64_t l = 0; l < plan_.config.num_hidden_layers; ++l) {
      TQ_TRY(Rotation r, plan_.make_r2(l));
      mats[fmt::format("r2.layers.{}", l)] = {r.n, rotation_matrix(r)};
    }
  for (const auto& [name, m] : mats) append_f64(header, data, name, m.first, m.second);
  header["__metadata__"] = {{"format", "pt"}};
  std::string hj = header.dump();
  hj.append((8 - hj.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = hj.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xFF);
  return out + hj + data;
}

}  // namespace tq
