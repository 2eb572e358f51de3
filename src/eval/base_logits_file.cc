#include "eval/base_logits_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "io/json_parse.h"

namespace tq::eval {
namespace {

constexpr char kMagic[8] = {'T', 'Q', 'B', 'A', 'S', 'E', 'L', 'G'};
constexpr int kVersion = 1;

uint64_t row_bytes(int64_t vocab, int64_t top_k) {
  return top_k == 0 ? 4 * uint64_t(vocab) : 28 + 8 * uint64_t(top_k);
}

// Bytes of one window record, or 0 on overflow.
uint64_t record_bytes(const BaseLogitsHeader& h) {
  uint64_t rows = 0, total = 0;
  if (__builtin_mul_overflow(uint64_t(h.scored_per_window()), row_bytes(h.vocab, h.top_k), &rows) ||
      __builtin_add_overflow(rows, 4 * uint64_t(h.seq_len), &total))
    return 0;
  return total;
}

nlohmann::json header_json(const BaseLogitsHeader& h) {
  return {{"format", "tq-base-logits"},
          {"version", kVersion},
          {"text_sha256", h.text_sha256},
          {"protocol", protocol_name(h.protocol)},
          {"seq_len", h.seq_len},
          {"windows", h.windows},
          {"bos", h.bos},
          {"first_target", h.first_target},
          {"vocab", h.vocab},
          {"top_k", h.top_k},
          {"model", h.model},
          {"model_fingerprint", h.model_fingerprint}};
}

Result<BaseLogitsHeader> parse_header(const nlohmann::json& j, const std::string& path) {
  BaseLogitsHeader h;
  try {
    if (!j.is_object() || j.value("format", "") != "tq-base-logits")
      return err("{}: not a tq base-logits file (header format)", path);
    if (j.at("version").get<int>() != kVersion)
      return err("{}: base-logits version {} not supported (expected {})", path,
                 j.at("version").dump(), kVersion);
    h.text_sha256 = j.at("text_sha256").get<std::string>();
    TQ_TRY(h.protocol, parse_protocol(j.at("protocol").get<std::string>()));
    h.seq_len = j.at("seq_len").get<int64_t>();
    h.windows = j.at("windows").get<int64_t>();
    h.bos = j.at("bos").get<bool>();
    h.first_target = j.at("first_target").get<int64_t>();
    h.vocab = j.at("vocab").get<int64_t>();
    h.top_k = j.at("top_k").get<int64_t>();
    h.model = j.at("model").get<std::string>();
    h.model_fingerprint = j.at("model_fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return err("{}: bad base-logits header: {}", path, printable(e.what()));
  }
  constexpr int64_t kMaxDim = int64_t(1) << 31;
  if (h.seq_len < 2 || h.seq_len > kMaxDim || h.first_target < 1 || h.first_target >= h.seq_len ||
      h.windows < 1 || h.vocab < 2 || h.vocab > kMaxDim || h.top_k < 0 || h.top_k > h.vocab)
    return err(
        "{}: bad base-logits header values (seq_len {}, first_target {}, windows {}, "
        "vocab {}, top_k {})",
        path, h.seq_len, h.first_target, h.windows, h.vocab, h.top_k);
  return h;
}

}  // namespace

BaseLogitsWriter::BaseLogitsWriter(BaseLogitsWriter&& o) noexcept
    : path_(std::move(o.path_)),
      tmp_path_(std::move(o.tmp_path_)),
      h_(std::move(o.h_)),
      f_(o.f_),
      written_(o.written_),
      done_(o.done_) {
  o.f_ = nullptr;
  o.done_ = true;
}

BaseLogitsWriter::~BaseLogitsWriter() {
  if (f_) std::fclose(f_);
  if (!done_ && !tmp_path_.empty()) std::remove(tmp_path_.c_str());
}

Result<BaseLogitsWriter> BaseLogitsWriter::create(const std::string& path,
                                                  const BaseLogitsHeader& h) {
  BaseLogitsWriter w;
  w.path_ = path;
  w.tmp_path_ = fmt::format("{}.tmp-{}", path, ::getpid());
  w.h_ = h;
  if (h.top_k < 0 || h.top_k > h.vocab)
    return err("{}: --top-k {} outside 1..vocab {}", path, h.top_k, h.vocab);
  if (record_bytes(h) == 0) return err("{}: base-logits records too large", path);
  w.f_ = std::fopen(w.tmp_path_.c_str(), "wb");
  if (!w.f_) return err("{}: cannot create: {}", w.tmp_path_, std::strerror(errno));
  std::string js = header_json(h).dump();
  while ((16 + js.size()) % 8 != 0) js += ' ';
  uint64_t n = js.size();
  TQ_CHECK_OK(w.write(kMagic, 8));
  TQ_CHECK_OK(w.write(&n, 8));
  TQ_CHECK_OK(w.write(js.data(), js.size()));
  return w;
}

Status BaseLogitsWriter::write(const void* p, size_t n) {
  if (std::fwrite(p, 1, n, f_) != n)
    return err("{}: write failed: {}", tmp_path_, std::strerror(errno));
  return ok_status();
}

Status BaseLogitsWriter::write_window(std::span<const int32_t> window,
                                      std::span<const float> rows) {
  const size_t V = size_t(h_.vocab);
  if (int64_t(window.size()) != h_.seq_len || rows.size() != (window.size() - 1) * V)
    return err("{}: window shape does not match the header", path_);
  if (written_ >= h_.windows) return err("{}: more windows than the header declares", path_);
  TQ_CHECK_OK(write(window.data(), window.size() * 4));
  for (int64_t t = h_.first_target; t < h_.seq_len; ++t) {
    std::span<const float> row = rows.subspan(size_t(t - 1) * V, V);
    if (h_.top_k == 0) {
      TQ_CHECK_OK(write(row.data(), V * 4));
      continue;
    }
    TopKRow r = make_topk_row(row, window[t], int(h_.top_k));
    TQ_CHECK_OK(write(&r.lse, 8));
    TQ_CHECK_OK(write(&r.log_rest, 8));
    TQ_CHECK_OK(write(&r.nll, 8));
    TQ_CHECK_OK(write(&r.gap, 4));
    TQ_CHECK_OK(write(r.ids.data(), r.ids.size() * 4));
    TQ_CHECK_OK(write(r.logits.data(), r.logits.size() * 4));
  }
  ++written_;
  return ok_status();
}

Status BaseLogitsWriter::finish() {
  if (written_ != h_.windows)
    return err("{}: {} of {} windows written", path_, written_, h_.windows);
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fflush(f) != 0 || std::fclose(f) != 0)
    return err("{}: write failed: {}", tmp_path_, std::strerror(errno));
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    return err("{}: cannot rename {} into place: {}", path_, tmp_path_, std::strerror(errno));
  done_ = true;
  return ok_status();
}

Result<BaseLogitsReader> BaseLogitsReader::open(const std::string& path) {
  BaseLogitsReader r;
  TQ_TRY(r.file_, MappedFile::open(path));
  auto bytes = r.file_.bytes();
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return err("{}: not a tq base-logits file (no TQBASELG magic)", path);
  uint64_t n;
  std::memcpy(&n, bytes.data() + 8, 8);
  if (n > bytes.size() - 16) return err("{}: header length {} past end of file", path, n);
  TQ_TRY(auto j, parse_json({reinterpret_cast<const char*>(bytes.data()) + 16, n}, path));
  TQ_TRY(r.h_, parse_header(j, path));
  r.data_offset_ = 16 + n;
  r.row_bytes_ = row_bytes(r.h_.vocab, r.h_.top_k);
  r.record_bytes_ = record_bytes(r.h_);
  uint64_t data = 0;
  if (r.record_bytes_ == 0 || r.data_offset_ % 8 != 0 ||
      __builtin_mul_overflow(r.record_bytes_, uint64_t(r.h_.windows), &data) ||
      data != bytes.size() - r.data_offset_)
    return err("{}: size {} does not match its header ({} windows of {} bytes after {})", path,
               bytes.size(), r.h_.windows, r.record_bytes_, r.data_offset_);
  // Top-k ids index the candidate's rows: check them all once.
  for (int64_t w = 0; w < r.h_.windows && r.h_.top_k > 0; ++w)
    for (int64_t i = 0; i < r.h_.scored_per_window(); ++i) {
      const uint8_t* p = r.record(w) + 4 * r.h_.seq_len + uint64_t(i) * r.row_bytes_ + 28;
      for (int64_t k = 0; k < r.h_.top_k; ++k) {
        int32_t id;
        std::memcpy(&id, p + 4 * k, 4);
        if (id < 0 || id >= r.h_.vocab)
          return err("{}: window {} row {}: token id {} outside vocabulary {}", path, w, i, id,
                     r.h_.vocab);
      }
    }
  return r;
}

const uint8_t* BaseLogitsReader::record(int64_t w) const {
  return file_.bytes().data() + data_offset_ + uint64_t(w) * record_bytes_;
}

std::span<const int32_t> BaseLogitsReader::window_tokens(int64_t w) const {
  return {reinterpret_cast<const int32_t*>(record(w)), size_t(h_.seq_len)};
}

std::span<const float> BaseLogitsReader::full_row(int64_t w, int64_t j) const {
  const uint8_t* p = record(w) + 4 * h_.seq_len + uint64_t(j) * row_bytes_;
  return {reinterpret_cast<const float*>(p), size_t(h_.vocab)};
}

TopKRow BaseLogitsReader::topk_row(int64_t w, int64_t j) const {
  const uint8_t* p = record(w) + 4 * h_.seq_len + uint64_t(j) * row_bytes_;
  TopKRow r;
  const size_t k = size_t(h_.top_k);
  std::memcpy(&r.lse, p, 8);
  std::memcpy(&r.log_rest, p + 8, 8);
  std::memcpy(&r.nll, p + 16, 8);
  std::memcpy(&r.gap, p + 24, 4);
  r.ids.resize(k);
  r.logits.resize(k);
  std::memcpy(r.ids.data(), p + 28, 4 * k);
  std::memcpy(r.logits.data(), p + 28 + 4 * k, 4 * k);
  return r;
}

Status BaseLogitsReader::check_matches(const Windows& w, const std::string& text_sha256,
                                       int64_t vocab) const {
  const std::string& p = path();
  if (h_.text_sha256 != text_sha256)
    return err("{}: saved for a text with sha256 {}, not {}", p, h_.text_sha256, text_sha256);
  if (h_.protocol != w.protocol || h_.bos != w.bos || h_.seq_len != w.seq_len ||
      h_.windows != w.count || h_.first_target != w.first_target)
    return err(
        "{}: saved with protocol={} L={} windows={} bos={}, this run has protocol={} L={} "
        "windows={} bos={}",
        p, protocol_name(h_.protocol), h_.seq_len, h_.windows, h_.bos ? "yes" : "no",
        protocol_name(w.protocol), w.seq_len, w.count, w.bos ? "yes" : "no");
  if (h_.vocab != vocab)
    return err("{}: base vocabulary {} differs from the candidate's {}", p, h_.vocab, vocab);
  for (int64_t i = 0; i < w.count; ++i) {
    auto a = window_tokens(i), b = w.window(i);
    if (!std::equal(a.begin(), a.end(), b.begin()))
      return err("{}: window {} holds other token ids than the candidate's tokenizer gives", p, i);
  }
  return ok_status();
}

}  // namespace tq::eval
