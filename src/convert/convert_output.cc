// What tq convert writes besides the tensors: config.json, the dry-run plan text, the source
// fingerprint.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/sha256.h"
#include "convert/convert.h"

namespace tq {

namespace {

using json = nlohmann::json;

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", b / double(1ull << 20));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

}  // namespace

json output_config(const ConvertJob& job) {
  json c = job.config;
  // mlx-lm's save_config drops these; model_file would need trust_remote_code.
  for (const char* k :
       {"_name_or_path", "vision_config", "model_file", "quantization", "quantization_config"})
    c.erase(k);
  const ModelConfig& cfg = job.plan.config;
  c["tie_word_embeddings"] = cfg.tie_word_embeddings;
  if (!c.contains("rope_theta")) c["rope_theta"] = cfg.rope_theta;
  // llama/qwen2/qwen3 in mlx-lm read rope_scaling, never rope_parameters.
  if (!c.contains("rope_scaling") && cfg.rope_scaling && c.contains("rope_parameters") &&
      c["rope_parameters"].is_object()) {
    json rs = c["rope_parameters"];
    rs.erase("rope_theta");
    c["rope_scaling"] = rs;
  }
  c["torch_dtype"] = dtype_torch_name(job.plan.dtype);
  if (c.contains("dtype")) c["dtype"] = dtype_torch_name(job.plan.dtype);
  // An all-float plan (--no-quantize) is a plain float checkpoint: no quantization block.
  if (job.plan.any_quantized()) {
    json q = job.plan.quantization_json();
    c["quantization"] = q;
    c["quantization_config"] = q;
  }
  return c;
}

std::vector<std::string> describe_plan(const ConvertJob& job) {
  const QuantPlan& p = job.plan;
  std::vector<std::string> out;
  out.push_back(fmt::format(
      "source   {} ({}, {} {} layers, hidden {}, vocab {}, tied {})", job.source.path,
      source_kind_name(job.source.kind), family_name(p.config.family), p.config.num_hidden_layers,
      p.config.hidden_size, p.config.vocab_size, p.config.tie_word_embeddings ? "yes" : "no"));
  out.push_back(fmt::format("global   {}; float tensors and affine scales as {} ({})",
                            quant_spec_str(p.global), dtype_name(p.dtype), job.dtype_reason));
  for (const WeightTransform* t : job.transforms)
    for (const auto& line : t->describe()) out.push_back("transform " + line);
  out.push_back(fmt::format("{:<44} {:<16} {:<22} {:>8} {:>12}  {}", "module", "shape", "spec",
                            "bpw", "bytes", "decided by"));
  for (const auto& e : p.entries) {
    if (!e.kind->quantizable) continue;
    uint64_t bytes = e.spec ? quantized_bytes(*e.spec, e.shape[0], e.shape[1], p.dtype)
                            : static_cast<uint64_t>(shape_numel(e.shape)) * dtype_size(p.dtype);
    double bpw = 8.0 * static_cast<double>(bytes) / static_cast<double>(shape_numel(e.shape));
    out.push_back(fmt::format(
        "{:<44} {:<16} {:<22} {:>8.4f} {:>12}  {}", e.module, shape_str(e.shape),
        e.spec ? quant_spec_str(*e.spec) : std::string("float ") + std::string(dtype_name(p.dtype)),
        bpw, bytes, e.decided_by));
  }
  SizeStats s = p.size();
  int floats = 0;
  for (const auto& e : p.entries)
    if (!e.kind->quantizable) ++floats;
  out.push_back(
      fmt::format("plus {} float vectors (norms, biases) as {}", floats, dtype_name(p.dtype)));
  out.push_back(fmt::format("total    {} params, {} bytes ({}), {:.4f} bits per weight", s.params,
                            s.bytes, human_bytes(s.bytes), s.bpw));
  return out;
}

Result<std::string> source_fingerprint(const ModelSource& src) {
  Sha256 h;
  h.update(std::string(source_kind_name(src.kind)));
  try {
    h.update(src.config_json.dump());
  } catch (const json::exception& e) {
    return err("{}: cannot encode config: {}", src.path, e.what());
  }
  constexpr uint64_t kHead = 1 << 20, kSample = 64 << 10, kSamples = 16;
  std::vector<uint8_t> buf;
  for (const auto& f : src.weight_files) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err("{}: cannot open: {}", f, std::strerror(errno));
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(f, ec);
    h.update(fmt::format("{}:{};", std::filesystem::path(f).filename().string(), size));
    auto read_at = [&](uint64_t off, uint64_t n) -> Status {
      n = std::min(n, size - std::min(size, off));
      buf.resize(n);
      uint64_t got = 0;
      while (got < n) {
        ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return err("{}: read failed at offset {}", f, off + got);
        got += static_cast<uint64_t>(r);
      }
      h.update(buf);
      return ok_status();
    };
    Status st = read_at(0, kHead);  // headers: names, shapes, offsets
    for (uint64_t i = 1; st.ok() && i <= kSamples; ++i)
      st = read_at(size / (kSamples + 1) * i, kSample);
    if (st.ok() && size > kSample) st = read_at(size - kSample, kSample);
    ::close(fd);
    TQ_CHECK_OK(st);
  }
  return h.hex_digest();
}

}  // namespace tq
