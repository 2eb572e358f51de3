#include "model/gguf_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numbers>

#include "../testing/gguf_builder.h"
#include "model/gguf_tokenizer.h"
#include "model/model_source.h"

namespace tq {
namespace {

using testing::GgufBuilder;

// Rows of a [rows, cols] matrix whose row r holds r*100 + c.
std::vector<float> numbered(int64_t rows, int64_t cols) {
  std::vector<float> v(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = static_cast<float>(r * 100 + c);
  return v;
}

// The matrix whose row i is HF row perm[i] (what llama.cpp stores).
std::vector<float> gather_rows(const std::vector<float>& hf, const std::vector<int>& perm,
                               int64_t cols) {
  std::vector<float> out;
  for (int r : perm) out.insert(out.end(), hf.begin() + r * cols, hf.begin() + (r + 1) * cols);
  return out;
}

TEST(GgufModel, UnpermuteInvertsHandComputedPermutation) {
  // head_dim 4: reshape(2, 2) = [[0,1],[2,3]], swapaxes -> [[0,2],[1,3]] -> rows 0,2,1,3.
  const std::vector<float> hf = numbered(8, 3);
  const std::vector<float> gguf = gather_rows(hf, {0, 2, 1, 3, 4, 6, 5, 7}, 3);
  std::vector<float> out(hf.size());
  unpermute_qk_rows(gguf, out, /*n_head=*/2, /*rows=*/8, /*cols=*/3);
  EXPECT_EQ(out, hf);
  // head_dim 6: [[0,1,2],[3,4,5]] -> [[0,3],[1,4],[2,5]] -> rows 0,3,1,4,2,5.
  const std::vector<float> hf6 = numbered(6, 2);
  std::vector<float> out6(hf6.size());
  unpermute_qk_rows(gather_rows(hf6, {0, 3, 1, 4, 2, 5}, 2), out6, 1, 6, 2);
  EXPECT_EQ(out6, hf6);
}

TEST(GgufModel, NameTable) {
  const Family L = Family::kLlama;
  EXPECT_EQ(gguf_to_hf_name("token_embd.weight", L), "model.embed_tokens.weight");
  EXPECT_EQ(gguf_to_hf_name("output_norm.weight", L), "model.norm.weight");
  EXPECT_EQ(gguf_to_hf_name("output.weight", L), "lm_head.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.12.attn_q.weight", L), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.0.attn_output.weight", L),
            "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.ffn_norm.weight", L),
            "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.attn_norm.weight", L), "model.layers.3.input_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.ffn_down.weight", L), "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.attn_k.bias", L), "model.layers.1.self_attn.k_proj.bias");
  EXPECT_EQ(gguf_to_hf_name("blk.1.attn_q_norm.weight", Family::kQwen3),
            "model.layers.1.self_attn.q_norm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.2.attn_v.bias", Family::kQwen2),
            "model.layers.2.self_attn.v_proj.bias");
  // Names a family does not have.
  EXPECT_FALSE(gguf_to_hf_name("blk.1.attn_q_norm.weight", L).has_value());
  EXPECT_FALSE(gguf_to_hf_name("blk.1.attn_q.bias", Family::kQwen3).has_value());
  EXPECT_FALSE(gguf_to_hf_name("blk.1.ffn_up.bias", Family::kQwen2).has_value());
  for (const char* bad : {"blk.0.foo.weight", "blk.x.attn_q.weight", "blk.01.attn_q.weight",
                          "blk.attn_q.weight", "blk.-1.attn_q.weight", "token_embd.bias", ""})
    EXPECT_FALSE(gguf_to_hf_name(bad, L).has_value()) << bad;
}

// A complete tiny model: hidden 8, 2 heads of 4, 1 kv head, ffn 16, vocab 10, all F32.
struct Tiny {
  int64_t layers = 2, hidden = 8, heads = 2, kv = 1, hd = 4, ffn = 16, vocab = 10;
};

GgufBuilder tiny_model(const std::string& arch, bool tied, bool biases) {
  Tiny t;
  GgufBuilder g;
  g.kv_str("general.architecture", arch);
  g.kv_u32(arch + ".block_count", t.layers);
  g.kv_u32(arch + ".embedding_length", t.hidden);
  g.kv_u32(arch + ".feed_forward_length", t.ffn);
  g.kv_u32(arch + ".attention.head_count", t.heads);
  g.kv_u32(arch + ".attention.head_count_kv", t.kv);
  g.kv_u32(arch + ".context_length", 128);
  g.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
  auto mat = [&](const std::string& n, int64_t out, int64_t in) {
    g.tensor_f32(n, {static_cast<uint64_t>(in), static_cast<uint64_t>(out)}, numbered(out, in));
  };
  auto vec = [&](const std::string& n, int64_t len) {
    g.tensor_f32(n, {static_cast<uint64_t>(len)}, numbered(len, 1));
  };
  mat("token_embd.weight", t.vocab, t.hidden);
  vec("output_norm.weight", t.hidden);
  if (!tied) mat("output.weight", t.vocab, t.hidden);
  for (int l = 0; l < t.layers; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", t.hidden);
    mat(b + "attn_q.weight", t.heads * t.hd, t.hidden);
    mat(b + "attn_k.weight", t.kv * t.hd, t.hidden);
    mat(b + "attn_v.weight", t.kv * t.hd, t.hidden);
    mat(b + "attn_output.weight", t.hidden, t.heads * t.hd);
    if (biases) {
      vec(b + "attn_q.bias", t.heads * t.hd);
      vec(b + "attn_k.bias", t.kv * t.hd);
      vec(b + "attn_v.bias", t.kv * t.hd);
      if (arch == "llama") vec(b + "attn_output.bias", t.hidden);  // HF attention_bias: all four
    }
    vec(b + "ffn_norm.weight", t.hidden);
    mat(b + "ffn_gate.weight", t.ffn, t.hidden);
    mat(b + "ffn_up.weight", t.ffn, t.hidden);
    mat(b + "ffn_down.weight", t.hidden, t.ffn);
  }
  return g;
}

struct Parsed {
  std::vector<uint8_t> bytes;
  std::shared_ptr<const GgufFile> file;
};

Parsed parse(const GgufBuilder& g) {
  Parsed p;
  p.bytes = g.build();
  auto r = GgufFile::parse(p.bytes, "tiny.gguf");
  EXPECT_TRUE(r.ok()) << r.error().message;
  if (r.ok()) p.file = std::make_shared<const GgufFile>(std::move(r).value());
  return p;
}

TEST(GgufModel, LlamaSourceUnpermutesQAndKOnly) {
  Parsed p = parse(tiny_model("llama", /*tied=*/true, /*biases=*/false));
  ASSERT_TRUE(p.file);
  auto src = GgufTensorSource::create(p.file);
  ASSERT_TRUE(src.ok()) << src.error().message;
  const auto& ts = (*src)->tensors();
  EXPECT_EQ(ts.size(), 2u + 2u * 9u);  // embed, norm, 9 per layer; no lm_head (tied)
  EXPECT_TRUE(std::is_sorted(ts.begin(), ts.end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  EXPECT_EQ((*src)->find("lm_head.weight"), nullptr);
  const TensorInfo* q = (*src)->find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (Shape{8, 8}));
  EXPECT_EQ(q->storage, "F32");
  EXPECT_EQ((*src)->find("model.layers.0.mlp.down_proj.weight")->shape, (Shape{8, 16}));

  // Stored rows r hold r*100+c; HF row h*4 + s*2 + j comes from stored row h*4 + 2j + s.
  auto qv = (*src)->load_f32("model.layers.1.self_attn.q_proj.weight");
  ASSERT_TRUE(qv.ok()) << qv.error().message;
  const int stored_for_hf[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(qv->data[r * 8], stored_for_hf[r] * 100.0f) << r;
  auto kv = (*src)->load_f32("model.layers.0.self_attn.k_proj.weight");  // 1 kv head
  ASSERT_TRUE(kv.ok());
  for (int r = 0; r < 4; ++r) EXPECT_EQ(kv->data[r * 8 + 3], stored_for_hf[r] * 100.0f + 3);
  auto vv = (*src)->load_f32("model.layers.0.self_attn.v_proj.weight");
  ASSERT_TRUE(vv.ok());
  EXPECT_EQ(vv->data, numbered(4, 8));  // not permuted
  EXPECT_FALSE((*src)->load_f32("nope").ok());
}

TEST(GgufModel, LlamaConfig) {
  Parsed p = parse(tiny_model("llama", /*tied=*/false, /*biases=*/false));
  ASSERT_TRUE(p.file);
  auto c = gguf_hf_config(*p.file, DType::kBF16);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const nlohmann::json& j = *c;
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["hidden_size"], 8);
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["intermediate_size"], 16);
  EXPECT_EQ(j["num_attention_heads"], 2);
  EXPECT_EQ(j["num_key_value_heads"], 1);
  EXPECT_EQ(j["head_dim"], 4);
  EXPECT_EQ(j["vocab_size"], 10);
  EXPECT_EQ(j["max_position_embeddings"], 128);
  EXPECT_EQ(j["rms_norm_eps"].get<double>(), 1e-6);   // f32 metadata, shortest decimal
  EXPECT_EQ(j["rope_theta"].get<double>(), 10000.0);  // default when absent
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["bos_token_id"], 1);
  EXPECT_EQ(j["eos_token_id"], 2);
  EXPECT_TRUE(j["rope_scaling"].is_null());
  EXPECT_EQ(j["attention_bias"], false);
  auto src = GgufTensorSource::create(p.file);
  ASSERT_TRUE(src.ok());
  EXPECT_NE((*src)->find("lm_head.weight"), nullptr);
}

TEST(GgufModel, Qwen2IsNotPermutedAndMapsBiases) {
  Parsed p = parse(tiny_model("qwen2", /*tied=*/true, /*biases=*/true));
  ASSERT_TRUE(p.file);
  auto src = GgufTensorSource::create(p.file);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_FALSE((*src)->geometry().permuted_qk);
  auto q = (*src)->load_f32("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->data, numbered(8, 8));
  auto qb = (*src)->load_f32("model.layers.0.self_attn.q_proj.bias");
  ASSERT_TRUE(qb.ok());
  EXPECT_EQ(qb->shape, (Shape{8}));
  EXPECT_EQ(qb->data, numbered(8, 1));
  auto c = gguf_hf_config(*p.file, DType::kF32);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ((*c)["model_type"], "qwen2");
  EXPECT_EQ((*c)["architectures"][0], "Qwen2ForCausalLM");
}

TEST(GgufModel, LlamaBiasesArePermutedToo) {
  Parsed p = parse(tiny_model("llama", true, true));
  auto src = GgufTensorSource::create(p.file);
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto qb = (*src)->load_f32("model.layers.0.self_attn.q_proj.bias");
  ASSERT_TRUE(qb.ok());
  EXPECT_EQ(qb->data, (std::vector<float>{0, 200, 100, 300, 400, 600, 500, 700}));
  EXPECT_EQ((*gguf_hf_config(*p.file, DType::kF32))["attention_bias"], true);
}

TEST(GgufModel, RejectsUnsupportedArchAndUnknownOrMissingTensors) {
  Parsed p = parse(tiny_model("gemma", true, false));
  auto c = gguf_hf_config(*p.file, DType::kF32);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message,
            "tiny.gguf: architecture 'gemma' is not supported (supported: llama, qwen2, qwen3)");

  auto g = tiny_model("llama", true, false);
  g.tensor_f32("blk.0.mystery.weight", {2}, {1, 2});
  Parsed q = parse(g);
  auto s = GgufTensorSource::create(q.file);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "tiny.gguf: tensor 'blk.0.mystery.weight' has no Hugging Face name in a llama "
            "checkpoint (not supported)");

  auto h = tiny_model("llama", true, false);
  h.tensor_f32("blk.5.attn_norm.weight", {8}, std::vector<float>(8));
  Parsed r = parse(h);
  auto s2 = GgufTensorSource::create(r.file);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.error().message.find("is past block_count 2"), std::string::npos);

  GgufBuilder m;  // metadata without the layers' tensors
  m.kv_str("general.architecture", "llama");
  m.kv_u32("llama.block_count", 1);
  m.kv_u32("llama.embedding_length", 8);
  m.kv_u32("llama.attention.head_count", 2);
  m.kv_u32("llama.feed_forward_length", 16);
  m.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  m.tensor_f32("token_embd.weight", {8, 2}, std::vector<float>(16));
  Parsed mp = parse(m);
  auto s3 = GgufTensorSource::create(mp.file);
  ASSERT_FALSE(s3.ok());
  EXPECT_TRUE(s3.error().message.starts_with(
      "tiny.gguf: tensors do not match the llama config: 10 missing (model.layers.0."))
      << s3.error().message;
}

TEST(GgufModel, Llama3RopeFreqsBecomeRopeScaling) {
  auto g = tiny_model("llama", true, false);
  const int dim = 64;
  const double theta = 500000.0, factor = 8.0;
  g.kv_f32("llama.rope.freq_base", static_cast<float>(theta));
  g.kv_u32("llama.rope.dimension_count", dim);
  // Factors as llama.cpp's converter computes them (factor 8, low 1, high 4, original 8192).
  std::vector<float> f;
  for (int i = 0; i < dim / 2; ++i) {
    double wavelen = 2 * std::numbers::pi * std::pow(theta, 2.0 * i / dim);
    if (wavelen < 8192 / 4.0) {
      f.push_back(1.0f);
    } else if (wavelen > 8192 / 1.0) {
      f.push_back(static_cast<float>(factor));
    } else {
      double smooth = (8192 / wavelen - 1) / (4 - 1);
      f.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  g.tensor_f32("rope_freqs.weight", {static_cast<uint64_t>(dim / 2)}, f);
  Parsed p = parse(g);
  auto c = gguf_hf_config(*p.file, DType::kF32);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const auto& rs = (*c)["rope_scaling"];
  EXPECT_EQ(rs["rope_type"], "llama3");
  EXPECT_EQ(rs["factor"].get<double>(), 8.0);
  EXPECT_EQ(rs["original_max_position_embeddings"], 8192);
  EXPECT_EQ(rs["low_freq_factor"].get<double>(), 1.0);
  EXPECT_EQ(rs["high_freq_factor"].get<double>(), 4.0);
  auto src = GgufTensorSource::create(p.file);  // rope_freqs is derived, not a weight
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ((*src)->tensors().size(), 20u);
}

TEST(GgufModel, LinearAndYarnRopeScaling) {
  for (const char* type : {"linear", "yarn"}) {
    auto g = tiny_model("qwen2", true, true);
    g.kv_str("qwen2.rope.scaling.type", type);
    g.kv_f32("qwen2.rope.scaling.factor", 4.0f);
    g.kv_u32("qwen2.rope.scaling.original_context_length", 32768);
    Parsed p = parse(g);
    auto c = gguf_hf_config(*p.file, DType::kF32);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ((*c)["rope_scaling"]["rope_type"], type);
    EXPECT_EQ((*c)["rope_scaling"]["factor"].get<double>(), 4.0);
    EXPECT_EQ((*c)["rope_scaling"]["original_max_position_embeddings"], 32768);
    auto src = GgufTensorSource::create(p.file);  // parse_model_config accepts it
    ASSERT_TRUE(src.ok()) << src.error().message;
    EXPECT_EQ((*src)->config().rope_scaling->factor, 4.0);
  }
  auto g = tiny_model("llama", true, false);
  g.kv_str("llama.rope.scaling.type", "longrope");
  g.kv_f32("llama.rope.scaling.factor", 4.0f);
  Parsed p = parse(g);
  auto c = gguf_hf_config(*p.file, DType::kF32);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, "tiny.gguf: rope scaling type 'longrope' is not supported");
}

TEST(GgufModel, OpenGgufModelSource) {
  auto dir = std::filesystem::temp_directory_path() / "tq_gguf_model_source_test";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "tiny.gguf").string();
  tiny_model("qwen2", /*tied=*/false, /*biases=*/true).write(path);
  auto m = open_gguf_model_source(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kind, SourceKind::kGguf);
  EXPECT_EQ(m->config.family, Family::kQwen2);
  EXPECT_EQ(m->config.hidden_size, 8);
  EXPECT_FALSE(m->config.tie_word_embeddings);
  EXPECT_EQ(m->config_json["model_type"], "qwen2");
  EXPECT_EQ(m->tensors->tensors().size(), 3u + 2u * 12u);  // embed, norm, lm_head; 12 per layer
  EXPECT_EQ(m->file_bytes, std::filesystem::file_size(path));
  ASSERT_EQ(m->weight_files.size(), 1u);
  auto bad = open_gguf_model_source((dir / "missing.gguf").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("missing.gguf: cannot open"), std::string::npos);
  std::filesystem::remove_all(dir);
}

GgufBuilder tiny_vocab(const std::string& pre) {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv_u32("llama.context_length", 256);
  g.kv_str("tokenizer.ggml.model", "gpt2");
  g.kv_str("tokenizer.ggml.pre", pre);
  g.kv_str_array("tokenizer.ggml.tokens", {"<|endoftext|>", "<s>", "a", "b", "ab", "\xc4\xa0",
                                           "\xc4\xa0"
                                           "ab",
                                           "<think>"});
  g.kv_i32_array("tokenizer.ggml.token_type", {3, 3, 1, 1, 1, 1, 1, 4});
  g.kv_str_array("tokenizer.ggml.merges", {"a b", "\xc4\xa0 ab"});
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 0);
  g.kv_str("tokenizer.chat_template", "{{ messages }}");
  return g;
}

TEST(GgufTokenizer, BuildsByteLevelBpe) {
  auto g = tiny_vocab("smollm");
  g.kv_bool("tokenizer.ggml.add_bos_token", false);
  Parsed p = parse(g);
  auto r = gguf_hf_tokenizer(*p.file);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& t = r->tokenizer;
  EXPECT_EQ(t["model"]["type"], "BPE");
  EXPECT_EQ(t["model"]["vocab"].size(), 8u);
  EXPECT_EQ(t["model"]["vocab"]["\xc4\xa0"
                                "ab"],
            6);
  EXPECT_EQ(t["model"]["merges"], nlohmann::json::parse(R"([["a","b"],["Ġ","ab"]])"));
  EXPECT_EQ(t["model"]["ignore_merges"], false);
  ASSERT_EQ(t["added_tokens"].size(), 3u);
  EXPECT_EQ(t["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(t["added_tokens"][0]["special"], true);
  EXPECT_EQ(t["added_tokens"][2]["content"], "<think>");
  EXPECT_EQ(t["added_tokens"][2]["special"], false);
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][1]["use_regex"], true);
  EXPECT_EQ(t["post_processor"]["type"], "ByteLevel");
  EXPECT_EQ(t["decoder"]["type"], "ByteLevel");
  const auto& tc = r->tokenizer_config;
  EXPECT_EQ(tc["bos_token"], "<s>");
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");
  EXPECT_EQ(tc["add_bos_token"], false);
  EXPECT_EQ(tc["chat_template"], "{{ messages }}");
  EXPECT_EQ(tc["model_max_length"], 256);
  EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(r->generation_config["eos_token_id"], 0);
  EXPECT_EQ(r->special_tokens_map["bos_token"]["content"], "<s>");
}

// What the converter copies into its output: the same files tq import writes, in that order.
TEST(GgufTokenizer, TheSourceHandsOverItsRebuiltFiles) {
  GgufBuilder g = tiny_model("llama", /*tied=*/true, /*biases=*/false);
  g.kv_str("tokenizer.ggml.model", "gpt2");
  g.kv_str("tokenizer.ggml.pre", "smollm");
  g.kv_str_array("tokenizer.ggml.tokens", {"<|endoftext|>", "<s>", "</s>", "a", "b", "ab"});
  g.kv_i32_array("tokenizer.ggml.token_type", {3, 3, 3, 1, 1, 1});
  g.kv_str_array("tokenizer.ggml.merges", {"a b"});
  Parsed p = parse(g);
  auto src = GgufTensorSource::create(p.file);
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto files = (*src)->tokenizer_files();
  ASSERT_TRUE(files.ok()) << files.error().message;
  auto tok = gguf_hf_tokenizer(*p.file);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const NamedFiles want = {{"tokenizer.json", tok->tokenizer.dump(2) + "\n"},
                           {"tokenizer_config.json", tok->tokenizer_config.dump(2) + "\n"},
                           {"special_tokens_map.json", tok->special_tokens_map.dump(2) + "\n"},
                           {"generation_config.json", tok->generation_config.dump(2) + "\n"}};
  EXPECT_EQ(*files, want);
  // Without tokenizer metadata the error names the file, as tq import's does.
  Parsed bare = parse(tiny_model("llama", true, false));
  auto no_tok = GgufTensorSource::create(bare.file);
  ASSERT_TRUE(no_tok.ok());
  EXPECT_FALSE((*no_tok)->tokenizer_files().ok());
}

TEST(GgufTokenizer, Llama3AddsBosByDefaultAndIgnoresMerges) {
  Parsed p = parse(tiny_vocab("llama-bpe"));
  auto r = gguf_hf_tokenizer(*p.file);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& t = r->tokenizer;
  EXPECT_EQ(t["model"]["ignore_merges"], true);
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  const auto& post = t["post_processor"];
  ASSERT_EQ(post["type"], "Sequence");
  const auto& tp = post["processors"][1];
  EXPECT_EQ(tp["type"], "TemplateProcessing");
  EXPECT_EQ(tp["single"][0]["SpecialToken"]["id"], "<s>");
  EXPECT_EQ(tp["special_tokens"]["<s>"]["ids"][0], 1);
  EXPECT_EQ(r->tokenizer_config["add_bos_token"], true);
}

TEST(GgufTokenizer, RejectsWhatItCannotRebuild) {
  auto msg = [](const GgufBuilder& g) {
    Parsed p = parse(g);
    auto r = gguf_hf_tokenizer(*p.file);
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(msg(tiny_vocab("weird-pre")),
            "tiny.gguf: llama.cpp pre-tokenizer 'weird-pre' is not supported");
  GgufBuilder t5;
  t5.kv_str("tokenizer.ggml.model", "t5");
  EXPECT_EQ(msg(t5),
            "tiny.gguf: tokenizer model 't5' is not supported yet (supported: 'gpt2' byte-level "
            "BPE, 'llama' SentencePiece BPE)");
  GgufBuilder spm;
  spm.kv_str("tokenizer.ggml.model", "llama");
  spm.kv_str_array("tokenizer.ggml.tokens", {"a", "b"});
  spm.kv_f32_array("tokenizer.ggml.scores", {0});
  EXPECT_EQ(msg(spm), "tiny.gguf: tokenizer.ggml.scores has 1 entries for 2 tokens");
  GgufBuilder rep;
  rep.kv_str("tokenizer.ggml.model", "gpt2");
  rep.kv_str_array("tokenizer.ggml.tokens", {"a", "b", "a"});
  EXPECT_EQ(msg(rep), "tiny.gguf: token 2 'a' repeats token 0");
  GgufBuilder bad_merge;
  bad_merge.kv_str("tokenizer.ggml.model", "gpt2");
  bad_merge.kv_str_array("tokenizer.ggml.tokens", {"a", "b"});
  bad_merge.kv_str_array("tokenizer.ggml.merges", {"ab"});
  EXPECT_EQ(msg(bad_merge), "tiny.gguf: merge 0 'ab' is not two tokens separated by one space");
  GgufBuilder bad_id;
  bad_id.kv_str("tokenizer.ggml.model", "gpt2");
  bad_id.kv_str_array("tokenizer.ggml.tokens", {"a"});
  bad_id.kv_u32("tokenizer.ggml.eos_token_id", 5);
  EXPECT_EQ(msg(bad_id),
            "tiny.gguf: tokenizer.ggml.eos_token_id = 5 is not a token id (vocabulary has 1)");
}

TEST(GgufTokenizer, SentencePieceMergesFromScores) {
  GgufBuilder g;
  g.kv_str("tokenizer.ggml.model", "llama");
  // Pieces: "▁ab" can be made as "▁"+"ab" or "▁a"+"b"; "ab" outranks "▁a" by score.
  g.kv_str_array("tokenizer.ggml.tokens",
                 {"<unk>", "<s>", "</s>", "<0x0A>", "\xe2\x96\x81", "a", "b", "ab",
                  "\xe2\x96\x81"
                  "a",
                  "\xe2\x96\x81"
                  "ab"});
  g.kv_f32_array("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2, -3, -4, -5, -6});
  g.kv_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1, 1, 1, 1, 1});
  g.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
  Parsed p = parse(g);
  auto r = gguf_hf_tokenizer(*p.file);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& m = r->tokenizer["model"];
  EXPECT_EQ(m["byte_fallback"], true);
  EXPECT_EQ(m["fuse_unk"], true);
  EXPECT_EQ(m["unk_token"], "<unk>");
  // By merged-piece score: "ab" (-4), "▁a" (-5), then "▁ab" (-6): longer left part first.
  EXPECT_EQ(m["merges"], nlohmann::json::parse(R"([["a","b"],["▁","a"],["▁a","b"],["▁","ab"]])"));
  EXPECT_EQ(r->tokenizer["normalizer"]["normalizers"][0]["prepend"], "\xe2\x96\x81");
  EXPECT_TRUE(r->tokenizer["pre_tokenizer"].is_null());
  EXPECT_EQ(r->tokenizer["post_processor"]["type"], "TemplateProcessing");  // BOS by default
  EXPECT_EQ(r->tokenizer["decoder"]["decoders"][1]["type"], "ByteFallback");
  ASSERT_EQ(r->tokenizer["added_tokens"].size(), 3u);  // <unk>, <s>, </s>; not the byte token
  EXPECT_EQ(r->tokenizer_config["add_bos_token"], true);
}

}  // namespace
}  // namespace tq
