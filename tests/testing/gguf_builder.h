// A tiny GGUF writer for tests: builds valid files, and lets a test break any field on purpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace tq::testing {

struct GgufBytes {
  std::vector<uint8_t> b;
  void u8(uint8_t v) { b.push_back(v); }
  void u32(uint32_t v) { raw(&v, 4); }
  void i32(int32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  void pad_to(size_t align) {
    while (b.size() % align) b.push_back(0);
  }
};

// GGUF value type ids (spec numbering).
enum : uint32_t {
  kGU8 = 0,
  kGI8 = 1,
  kGU16 = 2,
  kGI16 = 3,
  kGU32 = 4,
  kGI32 = 5,
  kGF32 = 6,
  kGBool = 7,
  kGString = 8,
  kGArray = 9,
  kGU64 = 10,
  kGI64 = 11,
  kGF64 = 12,
};

class GgufBuilder {
 public:
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  uint64_t alignment = 32;
  // When set, written instead of the true counts (to test lying headers).
  int64_t tensor_count_override = -1;
  int64_t kv_count_override = -1;

  // Metadata: each call appends "key, type, value" already encoded.
  void kv_u32(const std::string& k, uint32_t v) { kv(k, kGU32).u32(v); }
  void kv_i32(const std::string& k, int32_t v) { kv(k, kGI32).i32(v); }
  void kv_u64(const std::string& k, uint64_t v) { kv(k, kGU64).u64(v); }
  void kv_f32(const std::string& k, float v) { kv(k, kGF32).f32(v); }
  void kv_bool(const std::string& k, bool v) { kv(k, kGBool).u8(v ? 1 : 0); }
  void kv_str(const std::string& k, const std::string& v) { kv(k, kGString).str(v); }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    auto& m = kv(k, kGArray);
    m.u32(kGString);
    m.u64(v.size());
    for (const auto& s : v) m.str(s);
  }
  void kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    auto& m = kv(k, kGArray);
    m.u32(kGI32);
    m.u64(v.size());
    for (int32_t x : v) m.i32(x);
  }
  void kv_f32_array(const std::string& k, const std::vector<float>& v) {
    auto& m = kv(k, kGArray);
    m.u32(kGF32);
    m.u64(v.size());
    for (float x : v) m.f32(x);
  }
  // Raw access for odd values: returns the buffer right after "key, type".
  GgufBytes& kv(const std::string& k, uint32_t type) {
    meta_.str(k);
    meta_.u32(type);
    ++n_kv_;
    return meta_;
  }

  // Tensors: `ne` innermost first; data is placed at the next aligned offset unless
  // offset_override >= 0.
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
              std::vector<uint8_t> data, int64_t offset_override = -1) {
    tensors_.push_back({name, std::move(ne), type, std::move(data), offset_override});
  }
  void tensor_f32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& v) {
    std::vector<uint8_t> d(v.size() * 4);
    std::memcpy(d.data(), v.data(), d.size());
    tensor(name, std::move(ne), 0, std::move(d));
  }

  std::vector<uint8_t> build() const {
    GgufBytes out;
    out.u32(magic);
    out.u32(version);
    out.u64(tensor_count_override >= 0 ? tensor_count_override : tensors_.size());
    out.u64(kv_count_override >= 0 ? kv_count_override : n_kv_);
    out.raw(meta_.b.data(), meta_.b.size());
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const auto& t : tensors_) {
      off = (off + alignment - 1) / alignment * alignment;
      offsets.push_back(t.offset_override >= 0 ? t.offset_override : off);
      off += t.data.size();
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      out.str(t.name);
      out.u32(t.ne.size());
      for (uint64_t d : t.ne) out.u64(d);
      out.u32(t.type);
      out.u64(offsets[i]);
    }
    out.pad_to(alignment);
    size_t base = out.b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].offset_override >= 0) continue;
      out.b.resize(std::max(out.b.size(), base + offsets[i]), 0);
      out.raw(tensors_[i].data.data(), tensors_[i].data.size());
    }
    return out.b;
  }

  void write(const std::string& path) const {
    auto b = build();
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<uint8_t> data;
    int64_t offset_override;
  };
  GgufBytes meta_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

}  // namespace tq::testing
