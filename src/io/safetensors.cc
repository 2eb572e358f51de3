// Strict safetensors reader (FORMATS.md §1): every length and offset is checked before use.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>

#include "io/json_parse.h"

namespace tq {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // MLX rejects N >= 1e8; Rust N > 1e8

Result<SafetensorsEntry> parse_entry(const std::string& path, const std::string& name,
                                     const nlohmann::json& v) {
  if (!v.is_object())
    return err("{}: tensor '{}': entry must be an object, got {}", path, name, json_type_name(v));
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end()) return err("{}: tensor '{}': missing 'dtype'", path, name);
  if (sh == v.end()) return err("{}: tensor '{}': missing 'shape'", path, name);
  if (off == v.end()) return err("{}: tensor '{}': missing 'data_offsets'", path, name);
  if (!dt->is_string())
    return err("{}: tensor '{}': dtype must be a string, got {}", path, name, json_type_name(*dt));
  const std::string& dname = dt->get_ref<const std::string&>();
  auto dtype = dtype_from_name(dname);
  if (!dtype) return err("{}: tensor '{}': unknown dtype '{}'", path, name, printable(dname));

  SafetensorsEntry e;
  e.name = name;
  e.dtype = *dtype;
  if (!sh->is_array()) return err("{}: tensor '{}': shape must be an array", path, name);
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned())
      return err("{}: tensor '{}': shape entries must be non-negative integers", path, name);
    uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel) ||
        numel > static_cast<uint64_t>(INT64_MAX))
      return err("{}: tensor '{}': shape {} overflows", path, name, sh->dump());
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    return err("{}: tensor '{}': data_offsets must be [begin, end] non-negative integers", path,
               name);
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end)
    return err("{}: tensor '{}': data_offsets [{}, {}] end before begin", path, name, e.begin,
               e.end);
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes))
    return err("{}: tensor '{}': byte size overflows", path, name);
  if (e.end - e.begin != nbytes)
    return err("{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {} {} needs {}", path,
               name, e.begin, e.end, e.end - e.begin, dname, shape_str(e.shape), nbytes);
  return e;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file,
                                            const std::string& path) {
  if (file.size() < 8)
    return err("{}: too short for a safetensors file ({} bytes)", path, file.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];  // little endian
  if (n == 0) return err("{}: header length is 0", path);
  if (n >= kMaxHeaderBytes) return err("{}: header length {} too large", path, n);
  if (n > file.size() - 8)
    return err("{}: header length {} past end of file ({} bytes)", path, n, file.size());
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  if (text[0] != '{') return err("{}: header does not start with '{{'", path);

  JsonParseOptions jopts;
  jopts.reject_duplicate_keys = true;
  jopts.max_depth = 4;  // {name: {shape: [..]}} needs 3
  TQ_TRY(nlohmann::json j, parse_json(std::string_view(text, n), path + " header", jopts));
  if (!j.is_object()) return err("{}: header is not a JSON object", path);

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t buffer_len = file.size() - h.data_start;
  for (const auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) return err("{}: __metadata__ must be an object", path);
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string())
          return err("{}: __metadata__ value of '{}' must be a string, got {}", path, printable(mk),
                     json_type_name(mv));
        h.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    for (char c : key)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        return err("{}: a tensor name contains control characters", path);
    TQ_TRY(SafetensorsEntry e, parse_entry(path, key, v));
    h.entries.push_back(std::move(e));
  }

  // Contiguity: sorted by offsets, the tensors must tile [0, buffer_len) exactly.
  std::vector<const SafetensorsEntry*> by_off;
  by_off.reserve(h.entries.size());
  for (const auto& e : h.entries) by_off.push_back(&e);
  std::sort(by_off.begin(), by_off.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  for (const SafetensorsEntry* e : by_off) {
    if (e->begin < pos)
      return err("{}: tensor '{}' data_offsets [{}, {}] overlap the previous tensor (ends at {})",
                 path, e->name, e->begin, e->end, pos);
    if (e->begin > pos)
      return err("{}: tensor '{}' data_offsets [{}, {}] leave a gap after offset {}", path, e->name,
                 e->begin, e->end, pos);
    pos = e->end;
  }
  if (pos != buffer_len)
    return err("{}: tensors cover {} bytes but the data buffer holds {} ({})", path, pos,
               buffer_len, pos < buffer_len ? "trailing bytes" : "truncated file");
  // json objects iterate in key order, so entries are already sorted by name.
  return h;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  TQ_TRY(MappedFile mf, MappedFile::open(path));
  TQ_TRY(SafetensorsHeader h, parse_safetensors(mf.bytes(), path));
  SafetensorsFile f;
  f.file_ = std::move(mf);
  f.data_start_ = h.data_start;
  f.entries_ = std::move(h.entries);
  f.metadata_ = std::move(h.metadata);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return (it != entries_.end() && it->name == name) ? &*it : nullptr;
}

std::span<const uint8_t> SafetensorsFile::data(const SafetensorsEntry& e) const {
  return file_.bytes().subspan(data_start_ + e.begin, e.end - e.begin);
}

TensorView SafetensorsFile::view(const SafetensorsEntry& e) const {
  return TensorView{e.name, e.dtype, e.shape, data(e)};
}

}  // namespace tq
