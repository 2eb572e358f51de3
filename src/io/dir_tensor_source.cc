// DirTensorSource: folds MLX "P.scales"/"P.biases" into "P.weight" and decodes to f32.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "formats/mlx_quant.h"
#include "io/checkpoint_dir.h"
#include "io/json_parse.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Result<std::unique_ptr<DirTensorSource>> DirTensorSource::open(const std::string& dir) {
  auto src = std::unique_ptr<DirTensorSource>(new DirTensorSource());
  TQ_TRY(src->ckpt_, open_checkpoint_dir(dir));
  for (const auto& f : src->ckpt_.shard_files) {
    TQ_TRY(SafetensorsFile sf, SafetensorsFile::open((fs::path(dir) / f).string()));
    src->files_.push_back(std::move(sf));
  }
  TQ_CHECK_OK(src->build());
  return src;
}

Result<std::unique_ptr<DirTensorSource>> DirTensorSource::open_companion(const std::string& dir,
                                                                         std::string_view stem) {
  auto src = std::unique_ptr<DirTensorSource>(new DirTensorSource());
  TQ_TRY(src->ckpt_, open_checkpoint_dir(dir));
  CheckpointDir& c = src->ckpt_;
  c.has_index = false, c.weight_map.clear(), c.shard_files.clear(), c.tokenizer_files.clear();
  const std::string one = std::string(stem) + ".safetensors", many = std::string(stem) + "-";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n == one || (n.starts_with(many) && n.find("-of-") != std::string::npos &&
                     ends_with(n, ".safetensors")))
      c.shard_files.push_back(n);
  }
  if (ec) return err("{}: cannot list directory: {}", dir, ec.message());
  if (c.shard_files.empty()) return err("{}: no {} file", dir, one);
  std::sort(c.shard_files.begin(), c.shard_files.end());
  for (const auto& f : c.shard_files) {
    TQ_TRY(SafetensorsFile sf, SafetensorsFile::open((fs::path(dir) / f).string()));
    src->files_.push_back(std::move(sf));
  }
  TQ_CHECK_OK(src->build());
  return src;
}

Result<NamedFiles> DirTensorSource::tokenizer_files() const {
  NamedFiles out;
  for (const auto& name : ckpt_.tokenizer_files) {
    const std::string path = (fs::path(ckpt_.dir) / name).string();
    std::ifstream in(path, std::ios::binary);
    if (!in) return err("{}: cannot open", path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return err("{}: read failed", path);
    out.emplace_back(name, std::move(text));
  }
  return out;
}

const SafetensorsEntry* DirTensorSource::stored(std::string_view stored_name,
                                                size_t* file_index) const {
  auto it = stored_.find(stored_name);
  if (it == stored_.end()) return nullptr;
  if (file_index) *file_index = it->second.file;
  return it->second.entry;
}

Status DirTensorSource::build() {
  const CheckpointDir& c = ckpt_;
  for (size_t fi = 0; fi < files_.size(); ++fi) {
    const SafetensorsFile& f = files_[fi];
    for (const auto& e : f.entries()) {
      if (c.has_index) {
        auto it = c.weight_map.find(e.name);
        if (it == c.weight_map.end())
          return err("{}: tensor '{}' is not in model.safetensors.index.json", f.path(), e.name);
        if (it->second != c.shard_files[fi])
          return err("{}: tensor '{}' is mapped to '{}' by model.safetensors.index.json", f.path(),
                     e.name, it->second);
      }
      auto [pos, inserted] = stored_.emplace(e.name, Stored{fi, &e});
      if (!inserted)
        return err("{}: tensor '{}' also appears in {}", f.path(), e.name,
                   files_[pos->second.file].path());
    }
  }
  if (c.has_index) {
    for (const auto& [name, file] : c.weight_map)
      if (!stored_.count(name))
        return err("{}: tensor '{}' listed in model.safetensors.index.json is missing",
                   printable((fs::path(c.dir) / file).string()), printable(name));
  }
  auto fpath = [&](const Stored& s) -> const std::string& { return files_[s.file].path(); };

  // Quantized modules first: each "P.scales" claims "P.weight" (and "P.biases").
  std::set<std::string> claimed;
  std::map<std::string, std::pair<TensorInfo, Parts>> logical;
  for (const auto& [name, s] : stored_) {
    if (!ends_with(name, ".scales")) continue;
    std::string p = name.substr(0, name.size() - 7);
    auto wit = stored_.find(p + ".weight");
    if (wit == stored_.end())
      return err("{}: tensor '{}' has no matching '{}.weight'", fpath(s), name, p);
    if (!c.quantization)
      return err("{}: tensor '{}' is quantized but {} has no quantization block", fpath(s), name,
                 c.config_path);
    std::optional<QuantSpec> spec = c.quantization->spec_for(p);
    if (!spec)
      return err("{}: module '{}' is marked unquantized (false) but '{}' exists", c.config_path, p,
                 name);
    const Stored& w = wit->second;
    const SafetensorsEntry& we = *w.entry;
    const SafetensorsEntry& se = *s.entry;
    auto bit = stored_.find(p + ".biases");
    bool affine = quant_mode_has_biases(spec->mode);
    const std::string sp = quant_spec_str(*spec);
    if (we.dtype != DType::kU32)
      return err("{}: tensor '{}.weight' is {} but a quantized weight must be U32", fpath(w), p,
                 dtype_name(we.dtype));
    if (affine && se.dtype != DType::kF16 && se.dtype != DType::kBF16 && se.dtype != DType::kF32)
      return err("{}: tensor '{}' is {} but {} scales must be F16, BF16 or F32", fpath(s), name,
                 dtype_name(se.dtype), sp);
    // MLX writes fp-mode scales as U8; other writers may name the 8-bit float type instead.
    const DType fp8_scale = spec->mode == QuantMode::kNvfp4 ? DType::kF8E4M3 : DType::kF8E8M0;
    if (!affine && se.dtype != DType::kU8 && se.dtype != fp8_scale)
      return err("{}: tensor '{}' is {} but {} scales must be U8 or {}", fpath(s), name,
                 dtype_name(se.dtype), sp, dtype_name(fp8_scale));
    if (!affine && bit != stored_.end())
      return err("{}: tensor '{}.biases' must not exist for {}", fpath(bit->second), p, sp);
    if (affine && bit == stored_.end())
      return err("{}: tensor '{}.biases' is missing ({} needs scales and biases)", fpath(s), p, sp);
    // weight [..., out, in*bits/32], scales [..., out, in/g]
    const Shape& ws = we.shape;
    const Shape& ss = se.shape;
    bool ok = ws.size() >= 2 && ss.size() == ws.size() &&
              std::equal(ws.begin(), ws.end() - 1, ss.begin());
    int64_t cols = ok ? ss.back() * spec->group_size : 0;
    if (!ok || cols * spec->bits != ws.back() * 32)
      return err("{}: '{}.weight' {} and '{}' {} do not fit {}", fpath(w), p, shape_str(ws), name,
                 shape_str(ss), sp);
    if (affine && (bit->second.entry->shape != ss || bit->second.entry->dtype != se.dtype))
      return err("{}: '{}.biases' {} {} must match '{}' {} {}", fpath(bit->second), p,
                 dtype_name(bit->second.entry->dtype), shape_str(bit->second.entry->shape), name,
                 dtype_name(se.dtype), shape_str(ss));

    TensorInfo ti;
    ti.name = p + ".weight";
    ti.shape = ws;
    ti.shape.back() = cols;
    ti.storage = std::string(quant_mode_name(spec->mode));
    ti.stored_dtype = se.dtype;
    ti.mlx_quant = *spec;
    ti.stored_bytes = (we.end - we.begin) + (se.end - se.begin);
    Parts parts{w, s, std::nullopt};
    if (affine) {
      ti.stored_bytes += bit->second.entry->end - bit->second.entry->begin;
      parts.biases = bit->second;
      claimed.insert(p + ".biases");
    }
    claimed.insert(name);
    claimed.insert(p + ".weight");
    std::string key = ti.name;
    logical.emplace(std::move(key), std::make_pair(std::move(ti), parts));
  }
  for (const auto& [name, s] : stored_) {
    if (claimed.count(name)) continue;
    TensorInfo ti;
    ti.name = name;
    ti.shape = s.entry->shape;
    ti.storage = std::string(dtype_name(s.entry->dtype));
    ti.stored_dtype = s.entry->dtype;
    ti.stored_bytes = s.entry->end - s.entry->begin;
    logical.emplace(name, std::make_pair(std::move(ti), Parts{s, std::nullopt, std::nullopt}));
  }
  if (c.quantization) {
    for (const auto& [p, spec] : c.quantization->modules)
      if (spec && !stored_.count(p + ".scales") && stored_.count(p + ".weight"))
        ckpt_.warnings.push_back(fmt::format(
            "{}: module '{}' has a quantization entry but no '{}.scales' (mlx-lm would fail)",
            c.config_path, p, p));
  }
  for (auto& [name, v] : logical) {
    infos_.push_back(std::move(v.first));
    parts_.push_back(v.second);
  }
  return ok_status();
}

Result<FloatTensor> DirTensorSource::load_f32(const std::string& name) const {
  return load(name, /*f32_math=*/false);
}

Result<FloatTensor> DirTensorSource::load_f32_compute(const std::string& name) const {
  return load(name, /*f32_math=*/true);
}

Result<FloatTensor> DirTensorSource::load(const std::string& name, bool f32_math) const {
  const TensorInfo* ti = find(name);
  if (ti == nullptr) return err("{}: no tensor '{}'", ckpt_.dir, name);
  const Parts& parts = parts_[static_cast<size_t>(ti - infos_.data())];
  const SafetensorsFile& wf = files_[parts.weight.file];
  const SafetensorsEntry& we = *parts.weight.entry;
  FloatTensor out;
  out.shape = ti->shape;
  out.data.resize(static_cast<size_t>(shape_numel(ti->shape)));
  if (ti->mlx_quant) {
    const int64_t cols = ti->shape.back();
    const int64_t rows = cols == 0 ? 0 : shape_numel(ti->shape) / cols;
    const SafetensorsFile& sf = files_[parts.scales->file];
    std::span<const uint8_t> scales = sf.data(*parts.scales->entry), biases;
    if (parts.biases) biases = files_[parts.biases->file].data(*parts.biases->entry);
    DType scale_dtype = ti->stored_dtype;
    std::vector<float> s32, b32;  // affine scales/biases widened, so s*q + b runs in f32
    if (f32_math && ti->mlx_quant->mode == QuantMode::kAffine &&
        (scale_dtype == DType::kBF16 || scale_dtype == DType::kF16)) {
      const size_t es = dtype_size(scale_dtype);
      s32.resize(scales.size() / es);
      b32.resize(biases.size() / es);
      convert_to_f32(scale_dtype, scales.first(s32.size() * es), s32);
      convert_to_f32(scale_dtype, biases.first(b32.size() * es), b32);
      scales = {reinterpret_cast<const uint8_t*>(s32.data()), s32.size() * sizeof(float)};
      biases = {reinterpret_cast<const uint8_t*>(b32.data()), b32.size() * sizeof(float)};
      scale_dtype = DType::kF32;
    }
    Status st = dequantize_mlx(*ti->mlx_quant, rows, cols, wf.data(we), scale_dtype, scales, biases,
                               out.data);
    if (!st.ok()) return err("{}: tensor '{}': {}", wf.path(), name, st.error().message);
    // Read once: keep the resident set near the f32 result alone (e.g. 1x, not 2x, a model).
    wf.release(we);
    sf.release(*parts.scales->entry);
    if (parts.biases) files_[parts.biases->file].release(*parts.biases->entry);
    return out;
  }
  if (!dtype_is_float(we.dtype))
    return err("{}: tensor '{}' is {} and cannot be read as f32", wf.path(), name,
               dtype_name(we.dtype));
  convert_to_f32(we.dtype, wf.data(we), out.data);
  wf.release(we);
  return out;
}

}  // namespace tq
