#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/utf8.h"
#include "formats/ggml_blocks.h"

namespace tq {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are hostile

// Smallest encoding of one element of each type, used to bound counts before allocating.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
      return 8;  // u64 length
    case GgufType::kArray:
      return 12;  // u32 type + u64 count
  }
  return 1;
}

bool is_fixed_size(GgufType t) { return t != GgufType::kString && t != GgufType::kArray; }

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                "int32",  "float32", "bool",   "string", "array",
                                                "uint64", "int64",   "float64"};
  auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "invalid";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

namespace {

// Reads one little-endian scalar of type t at p (p has enough bytes).
void decode_scalar(GgufType t, const uint8_t* p, int64_t& i, uint64_t& u, double& f) {
  auto rd = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case GgufType::kU8:
      u = rd(uint8_t{});
      i = static_cast<int64_t>(u);
      break;
    case GgufType::kI8:
      i = rd(int8_t{});
      break;
    case GgufType::kU16:
      u = rd(uint16_t{});
      i = static_cast<int64_t>(u);
      break;
    case GgufType::kI16:
      i = rd(int16_t{});
      break;
    case GgufType::kU32:
      u = rd(uint32_t{});
      i = static_cast<int64_t>(u);
      break;
    case GgufType::kI32:
      i = rd(int32_t{});
      break;
    case GgufType::kU64:
      u = rd(uint64_t{});
      i = static_cast<int64_t>(u);
      break;
    case GgufType::kI64:
      i = rd(int64_t{});
      break;
    case GgufType::kBool:
      i = rd(uint8_t{}) != 0;
      break;
    case GgufType::kF32:
      f = rd(float{});
      break;
    case GgufType::kF64:
      f = rd(double{});
      break;
    default:
      break;
  }
  if (t != GgufType::kU64 && t != GgufType::kF32 && t != GgufType::kF64)
    u = static_cast<uint64_t>(i);
}

}  // namespace

int64_t GgufValue::int_at(uint64_t k) const {
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  decode_scalar(elem_type, packed.data() + k * min_encoded_size(elem_type), i, u, f);
  return i;
}

double GgufValue::float_at(uint64_t k) const {
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  decode_scalar(elem_type, packed.data() + k * min_encoded_size(elem_type), i, u, f);
  if (elem_type == GgufType::kF32 || elem_type == GgufType::kF64) return f;
  return elem_type == GgufType::kU64 ? static_cast<double>(u) : static_cast<double>(i);
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// Cursor over the file image; every read is bounds-checked and errors name the file.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& path) : b_(bytes), path_(path) {}

  Result<GgufFile> run();

 private:
  uint64_t left() const { return b_.size() - pos_; }
  Status need(uint64_t n, std::string_view what) const {
    if (n > left())
      return err("{}: {} at offset {} needs {} bytes, only {} left in the file", path_, what, pos_,
                 n, left());
    return ok_status();
  }
  Result<uint32_t> u32(std::string_view what) {
    TQ_CHECK_OK(need(4, what));
    uint32_t v;
    std::memcpy(&v, b_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }
  Result<uint64_t> u64(std::string_view what) {
    TQ_CHECK_OK(need(8, what));
    uint64_t v;
    std::memcpy(&v, b_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  Result<std::string_view> str(std::string_view what) {
    size_t at = pos_;
    TQ_TRY(uint64_t n, u64(what));
    if (n > left())
      return err("{}: {} at offset {} has length {}, past the end of the file ({} bytes left)",
                 path_, what, at, n, left());
    std::string_view s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  Result<GgufValue> value(GgufType t, std::string_view key, int depth);
  Status tensor_info(GgufFile& f);

  std::span<const uint8_t> b_;
  const std::string& path_;
  uint64_t pos_ = 0;
};

Result<GgufValue> GgufParser::value(GgufType t, std::string_view key, int depth) {
  GgufValue v;
  v.type = t;
  if (is_fixed_size(t)) {
    uint64_t n = min_encoded_size(t);
    TQ_CHECK_OK(need(n, fmt::format("value of '{}'", key)));
    decode_scalar(t, b_.data() + pos_, v.i, v.u, v.f);
    pos_ += n;
    return v;
  }
  if (t == GgufType::kString) {
    TQ_TRY(v.str, str(fmt::format("string value of '{}'", key)));
    return v;
  }
  // Array: element type, count, elements.
  if (depth >= kMaxArrayDepth)
    return err("{}: metadata '{}' nests arrays deeper than {}", path_, key, kMaxArrayDepth);
  TQ_TRY(uint32_t et, u32(fmt::format("array type of '{}'", key)));
  if (!valid_type(et)) return err("{}: metadata '{}' has array element type {}", path_, key, et);
  v.elem_type = static_cast<GgufType>(et);
  TQ_TRY(v.count, u64(fmt::format("array count of '{}'", key)));
  uint64_t min = min_encoded_size(v.elem_type);
  if (v.count > left() / min)
    return err("{}: metadata '{}' claims {} array elements, more than the {} bytes left can hold",
               path_, key, v.count, left());
  if (is_fixed_size(v.elem_type)) {
    v.packed = b_.subspan(pos_, v.count * min);
    pos_ += v.count * min;
  } else if (v.elem_type == GgufType::kString) {
    v.strings.reserve(v.count);
    for (uint64_t k = 0; k < v.count; ++k) {
      TQ_TRY(auto s, str(fmt::format("string {} of '{}'", k, key)));
      v.strings.push_back(s);
    }
  } else {
    v.arrays.reserve(v.count);
    for (uint64_t k = 0; k < v.count; ++k) {
      TQ_TRY(auto sub, value(GgufType::kArray, key, depth + 1));
      v.arrays.push_back(std::move(sub));
    }
  }
  return v;
}

Status GgufParser::tensor_info(GgufFile& f) {
  GgufTensorInfo t;
  TQ_TRY(t.name, str("tensor name"));
  if (!is_valid_utf8(t.name)) return err("{}: tensor name at offset {} is not UTF-8", path_, pos_);
  TQ_TRY(uint32_t n_dims, u32(fmt::format("dimension count of tensor '{}'", t.name)));
  if (n_dims > kMaxDims)
    return err("{}: tensor '{}' has {} dimensions (at most {})", path_, t.name, n_dims, kMaxDims);
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    TQ_TRY(uint64_t ne, u64(fmt::format("dimensions of tensor '{}'", t.name)));
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (ne != 0 && static_cast<uint64_t>(numel) >
                        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne))
      return err("{}: tensor '{}' has too many elements", path_, t.name);
    numel *= static_cast<int64_t>(ne);
    t.ne.push_back(static_cast<int64_t>(ne));
  }
  TQ_TRY(t.type_id, u32(fmt::format("type of tensor '{}'", t.name)));
  TQ_TRY(t.offset, u64(fmt::format("offset of tensor '{}'", t.name)));
  auto info = ggml_type_info(t.type_id);
  if (!info) return err("{}: tensor '{}' has unknown ggml type id {}", path_, t.name, t.type_id);
  t.type_name = info->name;
  int64_t row = t.ne.empty() ? 1 : t.ne[0];
  if (info->block_elems <= 0 || info->block_bytes <= 0 || row % info->block_elems != 0)
    return err("{}: tensor '{}' row length {} is not a multiple of the {} block size {}", path_,
               t.name, row, info->name, info->block_elems);
  // bytes = (numel / block_elems) * block_bytes, checked against overflow.
  uint64_t blocks = static_cast<uint64_t>(numel / info->block_elems);
  if (blocks != 0 &&
      static_cast<uint64_t>(info->block_bytes) > std::numeric_limits<uint64_t>::max() / blocks)
    return err("{}: tensor '{}' byte size overflows", path_, t.name);
  t.nbytes = blocks * static_cast<uint64_t>(info->block_bytes);
  if (f.tensor_index_.count(t.name)) return err("{}: tensor '{}' is listed twice", path_, t.name);
  f.tensor_index_.emplace(t.name, f.tensors_.size());
  f.tensors_.push_back(std::move(t));
  return ok_status();
}

Result<GgufFile> GgufParser::run() {
  GgufFile f;
  f.path_ = path_;
  f.bytes_ = b_;
  TQ_TRY(uint32_t magic, u32("magic"));
  if (magic != kMagic) return err("{}: not a GGUF file (bad magic)", path_);
  TQ_TRY(f.version_, u32("version"));
  if (f.version_ == 1) return err("{}: unsupported GGUF version 1 (only 2 and 3)", path_);
  if (f.version_ != 2 && f.version_ != 3) {
    // A big-endian file reads its version byte-swapped.
    if ((f.version_ & 0xFFFF) == 0 && (f.version_ >> 24) <= 3)
      return err("{}: big-endian GGUF files are not supported", path_);
    return err("{}: unsupported GGUF version {} (only 2 and 3)", path_, f.version_);
  }
  TQ_TRY(uint64_t n_tensors, u64("tensor count"));
  TQ_TRY(uint64_t n_kv, u64("metadata count"));
  // Bound the counts by the bytes left: a tensor info takes >= 24 bytes, a KV >= 13.
  if (n_tensors > left() / 24)
    return err("{}: header claims {} tensors, more than the file can hold", path_, n_tensors);
  if (n_kv > left() / 13)
    return err("{}: header claims {} metadata entries, more than the file can hold", path_, n_kv);

  f.kvs_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    TQ_TRY(auto key, str(fmt::format("metadata key {}", k)));
    if (key.empty() || !is_valid_utf8(key))
      return err("{}: metadata key {} is empty or not UTF-8", path_, k);
    if (f.kv_index_.count(key)) return err("{}: metadata key '{}' appears twice", path_, key);
    TQ_TRY(uint32_t type, u32(fmt::format("type of '{}'", key)));
    if (!valid_type(type)) return err("{}: metadata '{}' has invalid type {}", path_, key, type);
    TQ_TRY(auto v, value(static_cast<GgufType>(type), key, 0));
    f.kv_index_.emplace(key, f.kvs_.size());
    f.kvs_.push_back(GgufKV{key, std::move(v)});
  }

  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->type != GgufType::kU32)
      return err("{}: general.alignment has type {} (expected uint32)", path_,
                 gguf_type_name(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      return err("{}: general.alignment {} is not a non-zero power of two", path_, a->u);
    f.alignment_ = a->u;
  }

  f.tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) TQ_CHECK_OK(tensor_info(f));

  // The data section starts at the next multiple of the alignment.
  uint64_t data = (pos_ + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (n_tensors > 0 && data > b_.size())
    return err("{}: data section at offset {} starts past the end of the file ({} bytes)", path_,
               data, b_.size());
  f.data_offset_ = data;
  uint64_t room = data <= b_.size() ? b_.size() - data : 0;

  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(f.tensors_.size());
  for (const auto& t : f.tensors_) {
    if (t.offset % f.alignment_ != 0)
      return err("{}: tensor '{}' offset {} is not a multiple of the alignment {}", path_, t.name,
                 t.offset, f.alignment_);
    if (t.offset > room || t.nbytes > room - t.offset)
      return err(
          "{}: tensor '{}' data ({} bytes at offset {}) runs past the end of the file ({} "
          "bytes)",
          path_, t.name, t.nbytes, data + t.offset, b_.size());
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const auto* prev = by_offset[k - 1];
    if (prev->offset + prev->nbytes > by_offset[k]->offset)
      return err("{}: tensor '{}' data overlaps tensor '{}'", path_, by_offset[k]->name,
                 prev->name);
  }
  return f;
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string path) {
  GgufParser p(bytes, path);
  return p.run();
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  TQ_TRY(MappedFile mf, MappedFile::open(path));
  TQ_TRY(GgufFile f, parse(mf.bytes(), path));
  f.file_ = std::move(mf);  // the mapping's address does not change on move
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& t) const {
  return bytes_.subspan(data_offset_ + t.offset, t.nbytes);
}

Result<std::optional<int64_t>> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_integer())
    return err("{}: metadata '{}' has type {} (expected an integer)", path_, key,
               gguf_type_name(v->type));
  if (v->type == GgufType::kU64 && v->u > static_cast<uint64_t>(INT64_MAX))
    return err("{}: metadata '{}' value {} is out of range", path_, key, v->u);
  return std::optional<int64_t>(v->i);
}

Result<std::optional<double>> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<double>();
  if (v->is_float()) return std::optional<double>(v->f);
  if (v->is_integer())
    return std::optional<double>(v->type == GgufType::kU64 ? static_cast<double>(v->u)
                                                           : static_cast<double>(v->i));
  return err("{}: metadata '{}' has type {} (expected a number)", path_, key,
             gguf_type_name(v->type));
}

Result<std::optional<bool>> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (v->type != GgufType::kBool)
    return err("{}: metadata '{}' has type {} (expected bool)", path_, key,
               gguf_type_name(v->type));
  return std::optional<bool>(v->i != 0);
}

Result<std::optional<std::string_view>> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<std::string_view>();
  if (v->type != GgufType::kString)
    return err("{}: metadata '{}' has type {} (expected string)", path_, key,
               gguf_type_name(v->type));
  return std::optional<std::string_view>(v->str);
}

Result<std::vector<std::string_view>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::vector<std::string_view>();
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString)
    return err("{}: metadata '{}' is not an array of strings", path_, key);
  return v->strings;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::vector<int64_t>();
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufType::kArray || !probe.is_integer())
    return err("{}: metadata '{}' is not an array of integers", path_, key);
  std::vector<int64_t> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) out[k] = v->int_at(k);
  return out;
}

Result<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::vector<double>();
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufType::kArray || !(probe.is_integer() || probe.is_float()))
    return err("{}: metadata '{}' is not an array of numbers", path_, key);
  std::vector<double> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) out[k] = v->float_at(k);
  return out;
}

Result<FloatTensor> GgufFile::load_f32(const GgufTensorInfo& t) const {
  auto info = ggml_type_info(t.type_id);
  if (!info) return err("{}: tensor '{}' has unknown ggml type id {}", path_, t.name, t.type_id);
  if (!info->can_dequantize)
    return err("{}: tensor '{}' has type {}, which tq cannot decode", path_, t.name, info->name);
  FloatTensor out;
  out.shape = t.shape();
  out.data.resize(static_cast<size_t>(t.numel()));
  if (out.data.empty()) return out;
  Status st = dequantize_ggml(t.type_id, tensor_bytes(t), t.numel(), out.data);
  if (!st.ok()) return err("{}: tensor '{}': {}", path_, t.name, st.error().message);
  file_.release(tensor_bytes(t));  // read once; no-op for caller-owned bytes
  return out;
}

}  // namespace tq
