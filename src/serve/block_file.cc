#include "serve/block_file.h"

#include <cstring>

#include "base/fast_hash.h"
#include "base/sha256.h"

namespace tq::serve {
namespace {

constexpr char kMagic[8] = {'T', 'Q', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr size_t kMaxVersion = 256;
// Magic, header size, three digests, tokens, four u32, payload size, version length.
constexpr size_t kFixed = 8 + 4 + 3 * 32 + 4 * kBlockTokens + 4 * 4 + 8 + 2;

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

struct Reader {
  std::span<const uint8_t> b;
  size_t at = 0;
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{b[at + i]} << (8 * i);
    at += n;
    return v;
  }
  void digest(Digest& d) {
    std::memcpy(d.data(), b.data() + at, 32);
    at += 32;
  }
};

}  // namespace

Digest root_key(const Digest& fingerprint) {
  Sha256 h;
  h.update("tq prompt cache root");
  h.update(fingerprint);
  return h.digest();
}

Digest block_key(const Digest& parent, std::span<const int32_t> tokens) {
  Sha256 h;
  h.update(parent);
  std::vector<uint8_t> le;
  for (int32_t t : tokens) put_u32(le, static_cast<uint32_t>(t));
  h.update(le);
  return h.digest();
}

std::string digest_hex(const Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += kHex[b >> 4], s += kHex[b & 15];
  return s;
}

std::vector<uint8_t> encode_block_file(const BlockHeader& h, std::span<const uint8_t> payload) {
  const std::string version = h.version.substr(0, kMaxVersion);
  std::vector<uint8_t> out;
  out.reserve(kFixed + version.size() + payload.size() + 8);
  put(out, kMagic, 8);
  put_u32(out, static_cast<uint32_t>(kFixed + version.size()));
  put(out, h.fingerprint.data(), 32);
  put(out, h.key.data(), 32);
  put(out, h.parent.data(), 32);
  for (int32_t t : h.tokens) put_u32(out, static_cast<uint32_t>(t));
  for (uint32_t v : {h.kv_type, h.layers, h.kv_heads, h.head_dim}) put_u32(out, v);
  put_u64(out, payload.size());
  out.push_back(static_cast<uint8_t>(version.size()));
  out.push_back(static_cast<uint8_t>(version.size() >> 8));
  put(out, version.data(), version.size());
  put(out, payload.data(), payload.size());
  put_u64(out, fast_hash64(out));
  return out;
}

Result<ParsedBlock> parse_block_file(std::span<const uint8_t> bytes) {
  if (bytes.size() < kFixed + 8) return err("block file too short ({} bytes)", bytes.size());
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return err("not a tq prompt-cache block file");
  Reader r{bytes, 8};
  const uint64_t header = r.le(4);
  ParsedBlock p;
  BlockHeader& h = p.header;
  r.digest(h.fingerprint);
  r.digest(h.key);
  r.digest(h.parent);
  for (auto& t : h.tokens) t = static_cast<int32_t>(r.le(4));
  h.kv_type = static_cast<uint32_t>(r.le(4));
  h.layers = static_cast<uint32_t>(r.le(4));
  h.kv_heads = static_cast<uint32_t>(r.le(4));
  h.head_dim = static_cast<uint32_t>(r.le(4));
  h.payload_bytes = r.le(8);
  const uint64_t vlen = r.le(2);
  if (vlen > kMaxVersion || header != kFixed + vlen)
    return err("block file header size {} does not match its version text", header);
  // Sizes are checked before any arithmetic on them can overflow.
  const uint64_t rest = bytes.size() - kFixed;
  if (vlen > rest || h.payload_bytes > rest - vlen || rest - vlen - h.payload_bytes != 8)
    return err("block file size {} does not match its header ({} payload bytes)", bytes.size(),
               h.payload_bytes);
  h.version.assign(reinterpret_cast<const char*>(bytes.data() + r.at), vlen);
  r.at += vlen;
  if (h.kv_type > 1) return err("block file has unknown KV type {}", h.kv_type);
  const uint64_t elem = h.kv_type == 0 ? 2 : 4;
  const uint64_t want = 2ULL * h.layers * h.kv_heads * h.head_dim * kBlockTokens * elem;
  if (h.layers > 4096 || h.kv_heads > 4096 || h.head_dim > 4096 || want != h.payload_bytes)
    return err("block file payload of {} bytes does not match its KV shape", h.payload_bytes);
  p.payload = bytes.subspan(r.at, h.payload_bytes);
  Reader tail{bytes, bytes.size() - 8};
  if (tail.le(8) != fast_hash64(bytes.first(bytes.size() - 8)))
    return err("block file checksum mismatch");
  if (block_key(h.parent, h.tokens) != h.key)
    return err("block file key does not match its tokens");
  return p;
}

}  // namespace tq::serve
