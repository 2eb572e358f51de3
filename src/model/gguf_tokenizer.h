// Hugging Face tokenizer files rebuilt from a GGUF's tokenizer.* metadata, so that
// `AutoTokenizer.from_pretrained(dir)` and mlx-lm load the imported checkpoint.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "io/gguf.h"

namespace tq {

struct HfTokenizerFiles {
  nlohmann::json tokenizer;           // tokenizer.json (`tokenizers` format)
  nlohmann::json tokenizer_config;    // tokenizer_config.json
  nlohmann::json special_tokens_map;  // special_tokens_map.json
  nlohmann::json generation_config;   // generation_config.json
};

// Supports tokenizer.ggml.model "gpt2" (byte-level BPE) with the pre-tokenizers llama.cpp
// names default, gpt-2, smollm (and its digit-splitting kin), llama-bpe/llama3, qwen2; and
// "llama" (SentencePiece BPE: merges rebuilt from the piece scores, byte fallback, "▁" spaces).
// Other models or pre-tokenizers are one clear error naming them.
Result<HfTokenizerFiles> gguf_hf_tokenizer(const GgufFile& f);

// The HF pre_tokenizer (and normalizer, null if none) for a llama.cpp pre-tokenizer name.
struct HfPreTokenizer {
  nlohmann::json normalizer;
  nlohmann::json pre_tokenizer;
  bool ignore_merges = false;    // llama3: a word already in the vocabulary is one token
  bool add_bos_default = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};
Result<HfPreTokenizer> hf_pre_tokenizer(std::string_view llama_cpp_pre, const std::string& path);

}  // namespace tq
