// Tiny seeded checkpoints for runtime tests: a float HF directory of any config, and a 4-bit
// g64 MLX one of the llama / qwen2 / qwen3 geometry.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/mlx_encode.h"
#include "formats/mlx_quant.h"
#include "io/safetensors.h"
#include "model/model_config.h"
#include "model/tensor_table.h"
#include "tensor/tensor.h"
#include "test_files.h"

namespace tq::testing {

inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A tiny float HF checkpoint of `cfg_json` with seeded weights and one outlier channel.
inline std::string write_tiny_model(const TempDir& dir, const nlohmann::json& cfg_json) {
  auto cfg = parse_model_config(cfg_json, "config.json");
  EXPECT_TRUE(cfg.ok()) << cfg.error().message;
  std::vector<TensorSpec> specs = expected_tensors(*cfg);
  std::vector<TensorDecl> decls;
  for (const auto& s : specs) decls.push_back({s.name, DType::kF32, s.shape});
  auto w = ShardedWriter::create(dir.path(), decls, {});
  EXPECT_TRUE(w.ok()) << w.error().message;
  uint32_t seed = 100;
  for (const auto& s : specs) {
    std::vector<float> v = randn(shape_numel(s.shape), seed++, 0.2f);
    if (s.shape.size() == 1 && s.name.find("norm") != std::string::npos)
      for (auto& x : v) x = 1.0f + 0.5f * x;
    if (s.kind->role == TensorRole::kMlpUp)
      for (int64_t r = 0; r < s.shape[0]; ++r) v[r * s.shape[1] + 3] *= 20.0f;
    EXPECT_TRUE((*w)->write(s.name, as_bytes(v)).ok());
  }
  EXPECT_TRUE((*w)->finish().ok());
  write_file(dir.file("config.json"), cfg_json.dump());
  return dir.path();
}

// A llama / qwen2 / qwen3 config of 2 layers, hidden 48, vocabulary 70.
inline nlohmann::json tiny_json(const std::string& type) {
  nlohmann::json j = {{"model_type", type},
                      {"hidden_size", 48},
                      {"num_hidden_layers", 2},
                      {"intermediate_size", 80},
                      {"num_attention_heads", 6},
                      {"num_key_value_heads", 2},
                      {"head_dim", 8},
                      {"rms_norm_eps", 1e-5},
                      {"vocab_size", 70},
                      {"max_position_embeddings", 256},
                      {"rope_theta", 10000.0},
                      {"tie_word_embeddings", type != "llama"}};
  if (type == "llama")
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 32}};
  if (type == "qwen2") j.erase("head_dim");
  return j;
}

// A 4-bit g64 MLX checkpoint of a tiny `type` model (linear layers quantized, the embedding f32);
// mlp_bits != 4 gives the MLP's matrices that width (per-module entries, as mlx-lm writes them).
inline std::string write_tiny_q4_model(const TempDir& dir, const std::string& type,
                                       int mlp_bits = 4) {
  nlohmann::json j = tiny_json(type);
  j["hidden_size"] = 64, j["intermediate_size"] = 128, j["num_attention_heads"] = 4;
  j["head_dim"] = 16, j["quantization"] = {{"group_size", 64}, {"bits", 4}};
  auto cfg = parse_model_config(j, "config.json");
  EXPECT_TRUE(cfg.ok()) << cfg.error().message;
  struct Out {
    TensorDecl decl;
    std::vector<uint8_t> bytes;
  };
  std::vector<Out> outs;
  uint32_t seed = 300;
  for (const auto& s : expected_tensors(*cfg)) {
    std::vector<float> v = randn(shape_numel(s.shape), seed++, 0.2f);
    if (s.shape.size() == 1 && s.name.find("norm") != std::string::npos)
      for (auto& x : v) x = 1.0f + 0.5f * x;
    const bool linear = s.shape.size() == 2 && s.kind->role != TensorRole::kEmbed;
    if (!linear) {
      outs.push_back({{s.name, DType::kF32, s.shape}, encode_from_f32(v, DType::kF32)});
      continue;
    }
    std::vector<uint8_t> q, sc, b;
    const std::string p = s.name.substr(0, s.name.size() - 7);
    QuantSpec spec;
    if (mlp_bits != 4 && p.find(".mlp.") != std::string::npos) {
      spec.bits = mlp_bits;
      j["quantization"][p] = {{"group_size", 64}, {"bits", mlp_bits}};
    }
    EXPECT_TRUE(quantize_mlx(spec, s.shape[0], s.shape[1], v, DType::kF32, &q, &sc, &b).ok());
    outs.push_back({{s.name, DType::kU32, {s.shape[0], s.shape[1] * spec.bits / 32}}, q});
    outs.push_back({{p + ".scales", DType::kF32, {s.shape[0], s.shape[1] / 64}}, sc});
    outs.push_back({{p + ".biases", DType::kF32, {s.shape[0], s.shape[1] / 64}}, b});
  }
  std::vector<TensorDecl> decls;
  for (const Out& o : outs) decls.push_back(o.decl);
  auto w = ShardedWriter::create(dir.path(), decls, {});
  EXPECT_TRUE(w.ok()) << w.error().message;
  for (const Out& o : outs) EXPECT_TRUE((*w)->write(o.decl.name, o.bytes).ok());
  EXPECT_TRUE((*w)->finish().ok());
  write_file(dir.file("config.json"), j.dump());
  return dir.path();
}

}  // namespace tq::testing
