// GGUF container (v2/v3): strict memory-mapped reader of metadata and tensor infos.
//
// Dimension order: GGUF stores ggml `ne`, innermost (contiguous) dimension first. A ggml matrix
// with ne = [in, out] is the row-major torch/HF matrix [out, in]; GgufTensorInfo::shape() gives
// the reversed, row-major order. Tensor data is decoded through formats/ggml_blocks.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/result.h"
#include "tensor/tensor.h"

namespace tq {

// Metadata value types, numbered as in the GGUF spec.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_type_name(GgufType t);  // "uint32", "string", "array", ...

// One metadata value. Strings and numeric array payloads point into the file's bytes.
struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars: integers and bool in `i` (u64 values above INT64_MAX in `u`), floats in `f`.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string_view str;  // kString
  // kArray: element type and count; numeric/bool elements stay packed little-endian in `packed`,
  // strings are listed in `strings`, nested arrays in `arrays`.
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  std::span<const uint8_t> packed;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;

  bool is_integer() const;  // any of the eight integer types
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  // Element `k` of a numeric/bool array as int64 / double (caller checks k < count).
  int64_t int_at(uint64_t k) const;
  double float_at(uint64_t k) const;
};

struct GgufKV {
  std::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string_view name;
  std::vector<int64_t> ne;     // ggml dims, innermost first (ne[0] = row length)
  uint32_t type_id = 0;        // ggml_type
  std::string_view type_name;  // "Q4_1", "F32", ...
  uint64_t offset = 0;         // relative to the data section
  uint64_t nbytes = 0;
  Shape shape() const { return Shape(ne.rbegin(), ne.rend()); }  // row-major: [out, in]
  int64_t numel() const;
};

class GgufFile {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;

  static Result<GgufFile> open(const std::string& path);
  // Parses a GGUF image the caller keeps alive for the result's lifetime (used by the fuzzer
  // and tests); `path` only names the image in error messages.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, std::string path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of tensor data

  const std::vector<GgufKV>& metadata() const { return kvs_; }  // file order
  const GgufValue* find(std::string_view key) const;
  // Typed getters: nullopt when the key is absent, an error naming the file and key when the
  // value has another type. get_int accepts every integer type; get_float also integers.
  Result<std::optional<int64_t>> get_int(std::string_view key) const;
  Result<std::optional<double>> get_float(std::string_view key) const;
  Result<std::optional<bool>> get_bool(std::string_view key) const;
  Result<std::optional<std::string_view>> get_string(std::string_view key) const;
  // Arrays; an absent key gives an empty vector (see find() to tell apart).
  Result<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // file order
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  std::span<const uint8_t> tensor_bytes(const GgufTensorInfo& t) const;
  // Decodes any supported ggml type to f32, shape = t.shape() (row-major).
  Result<FloatTensor> load_f32(const GgufTensorInfo& t) const;

 private:
  friend class GgufParser;
  MappedFile file_;  // empty when parsed from caller-owned bytes
  std::span<const uint8_t> bytes_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKV> kvs_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace tq
