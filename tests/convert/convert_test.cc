#include "convert/convert.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>

#include "../testing/test_files.h"
#include "base/sha256.h"
#include "convert/gptq_resume.h"
#include "formats/mlx_quant.h"
#include "io/staging_dir.h"
#include "model/tensor_table.h"
#include "quant/rtn_quantizer.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TempDir;

nlohmann::json tiny_config(int layers = 3, bool tied = false) {
  return {{"model_type", "llama"},
          {"hidden_size", 64},
          {"num_hidden_layers", layers},
          {"intermediate_size", 128},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"vocab_size", 96},
          {"max_position_embeddings", 256},
          {"rope_parameters", {{"rope_theta", 5000.0}}},
          {"tie_word_embeddings", tied},
          {"torch_dtype", "bfloat16"},
          {"_name_or_path", "x"}};
}

// A seeded float HF checkpoint (bf16 tensors) plus a tokenizer file.
std::string write_source(const TempDir& d, const nlohmann::json& cfg, uint32_t seed = 1) {
  std::string dir = d.file("src");
  fs::create_directories(dir);
  auto c = parse_model_config(cfg, "cfg");
  EXPECT_TRUE(c.ok());
  std::vector<TensorDecl> decls;
  for (const auto& t : expected_tensors(*c)) decls.push_back({t.name, DType::kBF16, t.shape});
  ShardedWriterOptions wo;
  wo.metadata = {{"format", "pt"}};
  auto w = ShardedWriter::create(dir, decls, wo);
  EXPECT_TRUE(w.ok());
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const auto& t : expected_tensors(*c)) {
    std::vector<float> v(static_cast<size_t>(shape_numel(t.shape)));
    for (auto& x : v) x = nd(rng);
    EXPECT_TRUE((*w)->write(t.name, encode_from_f32(v, DType::kBF16)).ok());
  }
  EXPECT_TRUE((*w)->finish().ok());
  testing::write_file(dir + "/config.json", cfg.dump(2));
  testing::write_file(dir + "/tokenizer.json", "{\"tok\": 1}\n");
  return dir;
}

ConvertOptions options(const std::string& src, const std::string& dst) {
  ConvertOptions o;
  o.source = src;
  o.dest = dst;
  o.record_timings = false;
  return o;
}

Result<ConvertSummary> convert(const ConvertOptions& o, LayerQuantizer* q = nullptr,
                               std::vector<WeightTransform*> transforms = {}) {
  TQ_TRY(ConvertJob job, prepare_convert(o, std::move(transforms)));
  RtnQuantizer rtn;
  return run_convert(job, q ? *q : rtn, o);
}

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Convert, WritesAnMlxDirectoryThatReadsBackAsPlanned) {
  TempDir d;
  std::string src = write_source(d, tiny_config());
  ConvertOptions o = options(src, d.file("out"));
  o.plan.keep_float = {"model.layers.1.mlp.up_proj"};
  auto s = convert(o);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->files, (std::vector<std::string>{"config.json", "model.safetensors",
                                                "model.safetensors.index.json", "tokenizer.json",
                                                "tq_metadata.json"}));
  EXPECT_EQ(dir_names(d.path()), (std::vector<std::string>{"out", "src"}));
  EXPECT_EQ(read_file(d.file("out/tokenizer.json")), "{\"tok\": 1}\n");

  auto cfg = nlohmann::json::parse(read_file(d.file("out/config.json")));
  EXPECT_EQ(cfg["quantization"], cfg["quantization_config"]);
  EXPECT_EQ(cfg["quantization"].dump(), R"({"bits":4,"group_size":64,"mode":"affine"})");
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["rope_theta"], 5000.0);  // from rope_parameters: mlx-lm reads only rope_theta
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
  EXPECT_FALSE(cfg.contains("_name_or_path"));

  // Read back: every quantized module equals RTN of the bf16 source; the kept one is float.
  auto in = open_model(src);
  auto out = open_model(d.file("out"));
  ASSERT_TRUE(in.ok() && out.ok()) << (out.ok() ? "" : out.error().message);
  EXPECT_EQ(out->kind, SourceKind::kMlxDir);
  SizeStats got = size_stats(*out->tensors);
  EXPECT_EQ(got.bytes, s->size.bytes);
  EXPECT_EQ(got.params, s->size.params);
  for (const auto& t : out->tensors->tensors()) {
    auto w = in->tensors->load_f32(t.name);
    auto q = out->tensors->load_f32(t.name);
    ASSERT_TRUE(w.ok() && q.ok()) << t.name;
    if (t.name == "model.layers.1.mlp.up_proj.weight" || t.name.find("norm") != std::string::npos) {
      EXPECT_FALSE(t.mlx_quant) << t.name;
      EXPECT_EQ(q->data, w->data) << t.name;
      continue;
    }
    ASSERT_TRUE(t.mlx_quant) << t.name;
    auto m = rtn_quantize_matrix(t.name, *w, *t.mlx_quant, DType::kBF16);
    ASSERT_TRUE(m.ok());
    std::vector<float> deq(w->data.size());
    ASSERT_TRUE(dequantize_mlx(*t.mlx_quant, t.shape[0], t.shape[1], m->weight, DType::kBF16,
                               m->scales, m->biases, deq)
                    .ok());
    EXPECT_EQ(q->data, deq) << t.name;
    double err = 0;
    for (size_t i = 0; i < deq.size(); ++i)
      err = std::max(err, double(std::abs(deq[i] - w->data[i])));
    EXPECT_LT(err, 0.05) << t.name;  // 4-bit of N(0, 0.05): well under the range / 15
  }
  auto meta = nlohmann::json::parse(read_file(d.file("out/tq_metadata.json")));
  EXPECT_EQ(meta["command"], "convert");
  EXPECT_EQ(meta["modules"]["model.layers.1.mlp.up_proj"], "float");
  EXPECT_EQ(meta["modules"]["lm_head"]["bits"], 4);
  EXPECT_EQ(meta["source"]["fingerprint"].get<std::string>().size(), 64u);
  EXPECT_FALSE(meta.contains("timings"));
}

TEST(Convert, RequantizesAnMlxSourceFromItsDequantizedValues) {
  TempDir d;
  std::string src = write_source(d, tiny_config(2));
  ASSERT_TRUE(convert(options(src, d.file("a"))).ok());
  ConvertOptions o = options(d.file("a"), d.file("b"));
  o.plan.mode = QuantMode::kMxfp8;
  auto job = prepare_convert(o);
  ASSERT_TRUE(job.ok()) << job.error().message;
  EXPECT_EQ(job->plan.dtype, DType::kBF16);  // the MLX source's scales dtype
  RtnQuantizer rtn;
  ASSERT_TRUE(run_convert(*job, rtn, o).ok());
  auto a = open_model(d.file("a"));
  auto b = open_model(d.file("b"));
  ASSERT_TRUE(a.ok() && b.ok());
  auto cfg = nlohmann::json::parse(read_file(d.file("b/config.json")));
  EXPECT_EQ(cfg["quantization"]["mode"], "mxfp8");
  const std::string name = "model.layers.1.self_attn.k_proj.weight";
  auto wa = a->tensors->load_f32(name);
  auto wb = b->tensors->load_f32(name);
  ASSERT_TRUE(wa.ok() && wb.ok());
  auto m = rtn_quantize_matrix(name, *wa, {QuantMode::kMxfp8, 8, 32}, DType::kBF16);
  ASSERT_TRUE(m.ok());
  std::vector<float> deq(wa->data.size());
  ASSERT_TRUE(dequantize_mlx(m->spec, 32, 64, m->weight, DType::kU8, m->scales, {}, deq).ok());
  EXPECT_EQ(wb->data, deq);
}

TEST(Convert, RerunsAreByteIdenticalAndTimingsOnlyTouchMetadata) {
  TempDir d;
  std::string src = write_source(d, tiny_config());
  ConvertOptions o = options(src, d.file("a"));
  o.max_shard_bytes = 20000;  // several shards + index
  ASSERT_TRUE(convert(o).ok());
  o.dest = d.file("b");
  ASSERT_TRUE(convert(o).ok());
  o.dest = d.file("c");
  o.record_timings = true;
  ASSERT_TRUE(convert(o).ok());
  auto names = dir_names(d.file("a"));
  const auto shards = std::count_if(names.begin(), names.end(), [](const std::string& n) {
    return n.rfind("model-0000", 0) == 0 && n.ends_with(".safetensors");
  });
  EXPECT_GE(shards, 3);  // config, index, metadata, tokenizer + the shards
  EXPECT_EQ(names.size(), static_cast<size_t>(shards) + 4);
  EXPECT_EQ(names, dir_names(d.file("b")));
  EXPECT_EQ(names, dir_names(d.file("c")));
  for (const auto& n : names) {
    EXPECT_EQ(read_file(d.file("a/" + n)), read_file(d.file("b/" + n))) << n;
    if (n != "tq_metadata.json") {
      EXPECT_EQ(read_file(d.file("a/" + n)), read_file(d.file("c/" + n))) << n;
    }
  }
  auto meta = nlohmann::json::parse(read_file(d.file("c/tq_metadata.json")));
  EXPECT_TRUE(meta["timings"].contains("total_s"));
  // Every shard is a strict safetensors file under the limit (plus its header).
  for (const auto& n : names) {
    if (!n.ends_with(".safetensors")) continue;
    auto f = SafetensorsFile::open(d.file("a/" + n));
    ASSERT_TRUE(f.ok()) << f.error().message;
    uint64_t bytes = 0;
    for (const auto& e : f->entries()) bytes += e.end - e.begin;
    EXPECT_TRUE(bytes <= 20000u || f->entries().size() == 1) << n;
  }
}

// The writer streams: a tensor's bytes are in its (partial) shard file as soon as write()
// returns, so the pipeline can free each layer.
TEST(Convert, ShardedWriterPutsBytesOnDiskAtWrite) {
  TempDir d;
  std::vector<TensorDecl> decls = {{"a", DType::kU8, {4}}, {"b", DType::kU8, {3}}};
  auto w = ShardedWriter::create(d.path(), decls);
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> b = {7, 8, 9};
  ASSERT_TRUE((*w)->write("b", b).ok());
  b = {0, 0, 0};  // the caller's buffer is free to go
  std::string partial = read_file(d.file(".model.safetensors.partial"));
  ASSERT_GE(partial.size(), 3u);
  EXPECT_EQ(partial.substr(partial.size() - 3), std::string("\x07\x08\x09"));
  EXPECT_FALSE(fs::exists(d.file("model.safetensors")));  // no loader sees it before finish
}

// Records what the pipeline hands the quantizer: the layer order and the tensors per call.
class RecordingQuantizer : public LayerQuantizer {
 public:
  Result<std::vector<QuantizedModule>> quantize(int64_t layer, const TensorMap& tensors,
                                                const std::map<std::string, QuantSpec>& specs,
                                                DType dtype) override {
    layers.push_back(layer);
    for (const auto& [name, t] : tensors) {
      auto c = classify(name, Family::kLlama);
      if (!c || c->layer != layer) mixed = true;  // a call must hold one layer's tensors only
    }
    return rtn.quantize(layer, tensors, specs, dtype);
  }
  nlohmann::json metadata() const override { return {{"method", "recording"}}; }
  RtnQuantizer rtn;
  std::vector<int64_t> layers;
  bool mixed = false;
};

// Unties: lm_head = embed_tokens; scales every layer's o_proj by 2.
class UntieTransform : public WeightTransform {
 public:
  std::vector<std::string> describe() const override { return {"untie lm_head"}; }
  Status edit_config(nlohmann::json& c) const override {
    c["tie_word_embeddings"] = false;
    return ok_status();
  }
  Status apply_globals(TensorMap& g) override {
    globals_seen = g.size();
    g["lm_head.weight"] = g.at("model.embed_tokens.weight");
    return ok_status();
  }
  Status apply_layer(int64_t layer, TensorMap& t) override {
    layers.push_back(layer);
    for (auto& x : t.at(fmt::format("model.layers.{}.self_attn.o_proj.weight", layer)).data) x *= 2;
    return ok_status();
  }
  nlohmann::json metadata() const override { return {{"kind", "untie"}}; }
  size_t globals_seen = 0;
  std::vector<int64_t> layers;
};

TEST(Convert, SeamsSeeOneLayerAtATimeAndTransformsEditConfigAndTensors) {
  TempDir d;
  std::string src = write_source(d, tiny_config(4, /*tied=*/true));
  ConvertOptions o = options(src, d.file("out"));
  o.plan.mode = QuantMode::kMxfp8;
  RecordingQuantizer q;
  UntieTransform untie;
  auto job = prepare_convert(o, {&untie});
  ASSERT_TRUE(job.ok()) << job.error().message;
  auto lines = describe_plan(*job);
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                          [](const std::string& l) { return l == "transform untie lm_head"; }));
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                          [](const std::string& l) { return l.rfind("lm_head ", 0) == 0; }));
  auto s = run_convert(*job, q, o);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(q.layers, (std::vector<int64_t>{-1, 0, 1, 2, 3}));
  EXPECT_FALSE(q.mixed);
  EXPECT_EQ(untie.globals_seen, 2u);  // embed_tokens + final norm (tied source: no lm_head)
  EXPECT_EQ(untie.layers, (std::vector<int64_t>{0, 1, 2, 3}));
  auto cfg = nlohmann::json::parse(read_file(d.file("out/config.json")));
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["quantization"]["mode"], "mxfp8");
  auto out = open_model(d.file("out"));
  ASSERT_TRUE(out.ok()) << out.error().message;
  auto head = out->tensors->load_f32("lm_head.weight");
  auto emb = out->tensors->load_f32("model.embed_tokens.weight");
  ASSERT_TRUE(head.ok() && emb.ok());
  EXPECT_EQ(head->data, emb->data);
  auto meta = nlohmann::json::parse(read_file(d.file("out/tq_metadata.json")));
  EXPECT_EQ(meta["transforms"][0]["kind"], "untie");
  EXPECT_EQ(meta["quantizer"]["method"], "recording");
}

TEST(Convert, WithoutTransformsGlobalsAreStreamedOneAtATime) {
  TempDir d;
  std::string src = write_source(d, tiny_config(2));
  RecordingQuantizer q;
  ASSERT_TRUE(convert(options(src, d.file("out")), &q).ok());
  // embed_tokens, layers 0 and 1, the final norm (nothing to quantize), then lm_head.
  EXPECT_EQ(q.layers, (std::vector<int64_t>{-1, 0, 1, -1, -1}));
  EXPECT_FALSE(q.mixed);
}

// Holds lm_head from the globals (given with the untie transform) until the last layer, as
// GPTQ's head does; `forever` never returns it.
class DeferringQuantizer : public LayerQuantizer {
 public:
  explicit DeferringQuantizer(int64_t last, bool forever) : last_(last), forever_(forever) {}
  Result<std::vector<QuantizedModule>> quantize(int64_t layer, const TensorMap& tensors,
                                                const std::map<std::string, QuantSpec>& specs,
                                                DType dtype) override {
    std::map<std::string, QuantSpec> now = specs;
    if (auto it = now.find("lm_head.weight"); it != now.end()) {
      held_ = TensorMap{{it->first, tensors.at(it->first)}};
      held_spec_ = {{it->first, it->second}};
      now.erase(it);
    }
    TQ_TRY(std::vector<QuantizedModule> out, rtn_.quantize(layer, tensors, now, dtype));
    if (layer == last_ && !forever_ && !held_.empty()) {
      TQ_TRY(std::vector<QuantizedModule> head, rtn_.quantize(-1, held_, held_spec_, dtype));
      for (auto& m : head) out.push_back(std::move(m));
    }
    return out;
  }
  nlohmann::json metadata() const override { return {{"method", "deferring"}}; }

 private:
  RtnQuantizer rtn_;
  int64_t last_;
  bool forever_;
  TensorMap held_;
  std::map<std::string, QuantSpec> held_spec_;
};

TEST(Convert, AQuantizerMayReturnAModuleInALaterGroupButMustReturnEveryOne) {
  TempDir d;
  std::string src = write_source(d, tiny_config(2, /*tied=*/true));
  ConvertOptions o = options(src, d.file("late"));
  UntieTransform untie;
  DeferringQuantizer late(1, false);
  auto s = convert(o, &late, {&untie});
  ASSERT_TRUE(s.ok()) << s.error().message;
  RecordingQuantizer rec;
  UntieTransform untie2;
  ASSERT_TRUE(convert(options(src, d.file("ref")), &rec, {&untie2}).ok());
  for (const char* f : {"model.safetensors", "config.json"})
    EXPECT_EQ(read_file(d.file(std::string("late/") + f)),
              read_file(d.file(std::string("ref/") + f)))
        << f;
  DeferringQuantizer never(1, true);
  UntieTransform untie3;
  auto bad = convert(options(src, d.file("never")), &never, {&untie3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("never returned module 'lm_head.weight'"), std::string::npos)
      << bad.error().message;
  EXPECT_FALSE(fs::exists(d.file("never")));  // nothing published
}

TEST(Convert, RefusesExistingOutputUnlessForcedAndCancelsCleanly) {
  TempDir d;
  std::string src = write_source(d, tiny_config(2));
  ConvertOptions o = options(src, d.file("out"));
  ASSERT_TRUE(convert(o).ok());
  std::string before = read_file(d.file("out/model.safetensors"));
  o.plan.bits = 8;
  auto again = convert(o);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message,
            d.file("out") + ": exists and is not empty (use --force to replace it)");
  // Cancelled: the old artifact stays, no staging directory survives.
  std::atomic<bool> stop{true};
  o.force = true;
  o.cancel = &stop;
  auto c = convert(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("interrupted"), std::string::npos);
  EXPECT_EQ(read_file(d.file("out/model.safetensors")), before);
  EXPECT_EQ(dir_names(d.path()), (std::vector<std::string>{"out", "src"}));
  // Stop after the first layer (the progress callback raises the flag).
  stop = false;
  o.progress = [&](const ConvertProgress& p) {
    if (p.step == 2) stop = true;
  };
  ASSERT_FALSE(convert(o).ok());
  EXPECT_EQ(read_file(d.file("out/model.safetensors")), before);
  EXPECT_EQ(dir_names(d.path()), (std::vector<std::string>{"out", "src"}));
  // Forced and complete: replaced.
  o.cancel = nullptr;
  o.progress = nullptr;
  ASSERT_TRUE(convert(o).ok());
  auto cfg = nlohmann::json::parse(read_file(d.file("out/config.json")));
  EXPECT_EQ(cfg["quantization"]["bits"], 8);
  EXPECT_EQ(dir_names(d.path()), (std::vector<std::string>{"out", "src"}));
}

TEST(Convert, StaleStagingDirectoriesOfAKilledRunAreCleared) {
  TempDir d;
  std::string src = write_source(d, tiny_config(2));
  // What a SIGKILL leaves: an unlocked staging directory with a partial shard.
  fs::create_directories(d.file("out.tmp-AbC123"));
  testing::write_file(d.file("out.tmp-AbC123/.model.safetensors.partial"), "xx");
  fs::create_directories(d.file("other.tmp-AbC123"));  // another destination's: left alone
  // A live one (locked by this process) is not stale.
  auto live = StagingDir::create(d.file("out"), false);
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(StagingDir::stale_staging_dirs(d.file("out")), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(d.file("out.tmp-AbC123")));  // create() already cleared it
  fs::create_directories(d.file("out.tmp-XyZ789"));
  EXPECT_EQ(StagingDir::stale_staging_dirs(d.file("out")),
            std::vector<std::string>{d.file("out.tmp-XyZ789")});
  ASSERT_TRUE(convert(options(src, d.file("out2"))).ok());
  ConvertOptions o = options(src, d.file("out"));
  ASSERT_TRUE(convert(o).ok());
  auto names = dir_names(d.path());
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.rfind("out.tmp-", 0) == 0; }),
            1);  // only the live one
  EXPECT_TRUE(fs::exists(d.file("other.tmp-AbC123")));
}

TEST(Convert, DryRunPlanNamesEveryModuleWithExactTotals) {
  TempDir d;
  std::string src = write_source(d, tiny_config(2));
  ConvertOptions o = options(src, d.file("out"));
  o.recipe = "mixed_3_6";
  auto job = prepare_convert(o);
  ASSERT_TRUE(job.ok()) << job.error().message;
  auto lines = describe_plan(*job);
  SizeStats s = job->plan.size();
  EXPECT_EQ(lines.back(), fmt::format("total    {} params, {} bytes ({:.1f} KiB), {:.4f} bits per "
                                      "weight",
                                      s.params, s.bytes, s.bytes / 1024.0, s.bpw));
  int modules = 0;
  for (const auto& l : lines)
    if (l.rfind("model.layers.", 0) == 0 || l.rfind("lm_head", 0) == 0 ||
        l.rfind("model.embed_tokens", 0) == 0)
      ++modules;
  EXPECT_EQ(modules, 2 * 7 + 2);
  EXPECT_FALSE(fs::exists(d.file("out")));
  // Presets refuse a non-affine mode and --bits, as mlx-lm does.
  o.plan.mode = QuantMode::kMxfp4;
  auto bad = prepare_convert(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "--recipe mixed_3_6 is affine only (as in mlx-lm); drop --mode mxfp4");
}

TEST(Convert, GptqResumeFingerprintCoversSourcePlanOptionsAndRows) {
  TempDir d;
  auto job = prepare_convert(options(write_source(d, tiny_config()), d.file("out")));
  ASSERT_TRUE(job.ok()) << job.error().message;
  CalibOptions calib;
  calib.files = {"a.txt"};
  GptqOptions gptq;
  const nlohmann::json rec = gptq_options_record(calib, gptq);
  EXPECT_EQ(rec.dump(),
            R"({"act_order":false,"calib":["a.txt"],"calib_seed":123,"calib_seq_len":512,)"
            R"("calib_tokens":65536,"damp":0.01,"gptq_block":128})");
  // The checkpoints of earlier versions stay resumable: the same bytes in the same order.
  Sha256 want;
  want.update(job->source.path);
  want.update(job->config.dump());
  want.update(job->plan.modules_json().dump());
  want.update(dtype_name(job->plan.dtype));
  want.update(rec.dump());
  want.update("rows");
  const std::string fp = gptq_resume_fingerprint(*job, calib, gptq, "rows");
  EXPECT_EQ(fp, want.hex_digest());
  EXPECT_NE(gptq_resume_fingerprint(*job, calib, gptq, "other rows"), fp);
  gptq.damp = 0.1;
  EXPECT_NE(gptq_resume_fingerprint(*job, calib, gptq, "rows"), fp);
  gptq.damp = 0.01;
  calib.seed = 7;
  EXPECT_NE(gptq_resume_fingerprint(*job, calib, gptq, "rows"), fp);
}

}  // namespace
}  // namespace tq
