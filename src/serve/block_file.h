// The prompt cache's block file: one KV block of 16 positions with what proves it belongs to
// this model and this prefix. Little-endian:
//   "TQKVBLK1", u32 header bytes (from the start through the version text),
//   fingerprint[32] (model weights, quantization, tokenizer, runtime arithmetic), key[32],
//   parent[32] (the hash chain, prompt_key.h), tokens i32[16], kv type u32 (0 f16, 1 f32),
//   layers, kv heads, head dim u32, payload bytes u64, version text u16 length + bytes,
//   payload, u64 checksum of everything before it (base/fast_hash.h: a changed 8-byte word is
//   always detected; reading a 2k-token prompt's blocks back costs milliseconds, not seconds).
// parse_block_file checks all of it; a file that fails is never served.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"

namespace tq::serve {

using Digest = std::array<uint8_t, 32>;
inline constexpr int kBlockTokens = 16;

// The hash chain: a block's key is SHA-256 of its parent's key and its 16 tokens; the first
// block's parent is root_key(fingerprint), so a key names the whole prefix on this model.
Digest root_key(const Digest& fingerprint);
Digest block_key(const Digest& parent, std::span<const int32_t> tokens);
std::string digest_hex(const Digest& d);

struct BlockHeader {
  Digest fingerprint{}, key{}, parent{};
  std::array<int32_t, kBlockTokens> tokens{};
  uint32_t kv_type = 0;  // 0: f16 bits, 1: f32
  uint32_t layers = 0, kv_heads = 0, head_dim = 0;
  uint64_t payload_bytes = 0;
  std::string version;  // tq's, informative
};

std::vector<uint8_t> encode_block_file(const BlockHeader& h, std::span<const uint8_t> payload);

struct ParsedBlock {
  BlockHeader header;
  std::span<const uint8_t> payload;  // into the parsed bytes
};
// A whole file's bytes: magic, sizes, the checksum, and that key = block_key(parent, tokens).
Result<ParsedBlock> parse_block_file(std::span<const uint8_t> bytes);

}  // namespace tq::serve
