// `tq kl --save-base FILE` / `--base-logits FILE`: a base model's rows for every scored target,
// so many candidates can be compared without loading the base model again.
//
// Layout (little-endian):
//   "TQBASELG" | u64 n | n bytes of JSON header, space-padded so that records start at a
//   multiple of 8 | `windows` records.
// Header: {"format":"tq-base-logits","version":1,"text_sha256","protocol","seq_len","windows",
//   "bos","first_target","vocab","top_k","model","model_fingerprint"}.
// Record of one window: i32 tokens[seq_len], then S = seq_len - first_target rows:
//   top_k == 0: f32 logits[vocab] per row (exact; KL as with the base model itself);
//   top_k == K: f64 lse, f64 log_rest, f64 nll, f32 gap, i32 ids[K], f32 logits[K] per row
//     (see TopKRow; KL is then the KL of the (K+1)-bucket coarsening, a lower bound).
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "base/mapped_file.h"
#include "base/result.h"
#include "eval/token_metrics.h"
#include "eval/windows.h"

namespace tq::eval {

struct BaseLogitsHeader {
  std::string text_sha256;
  Protocol protocol = Protocol::kMlx;
  int64_t seq_len = 0;
  int64_t windows = 0;
  bool bos = false;
  int64_t first_target = 1;
  int64_t vocab = 0;
  int64_t top_k = 0;  // 0: full rows
  std::string model;  // path of the base model
  std::string model_fingerprint;

  int64_t scored_per_window() const { return seq_len - first_target; }
};

class BaseLogitsWriter {
 public:
  BaseLogitsWriter(BaseLogitsWriter&& o) noexcept;
  BaseLogitsWriter& operator=(BaseLogitsWriter&&) = delete;
  ~BaseLogitsWriter();  // removes the partial file unless finish() succeeded

  // Writes to a temporary file beside `path`; finish() renames it into place.
  static Result<BaseLogitsWriter> create(const std::string& path, const BaseLogitsHeader& h);
  // `window`: the window's tokens [seq_len]; `rows`: the base logits [seq_len - 1, vocab].
  Status write_window(std::span<const int32_t> window, std::span<const float> rows);
  Status finish();

 private:
  BaseLogitsWriter() = default;
  Status write(const void* p, size_t n);
  std::string path_, tmp_path_;
  BaseLogitsHeader h_;
  std::FILE* f_ = nullptr;
  int64_t written_ = 0;
  bool done_ = false;
};

class BaseLogitsReader {
 public:
  static Result<BaseLogitsReader> open(const std::string& path);
  const BaseLogitsHeader& header() const { return h_; }
  const std::string& path() const { return file_.path(); }
  int64_t top_k() const { return h_.top_k; }

  // Errors when the file was made for another text, protocol, window set or vocabulary.
  Status check_matches(const Windows& w, const std::string& text_sha256, int64_t vocab) const;

  std::span<const int32_t> window_tokens(int64_t w) const;
  // Row j (0..scored_per_window-1) of window w; full_row needs top_k == 0, topk_row top_k > 0.
  std::span<const float> full_row(int64_t w, int64_t j) const;
  TopKRow topk_row(int64_t w, int64_t j) const;

 private:
  const uint8_t* record(int64_t w) const;
  MappedFile file_;
  BaseLogitsHeader h_;
  uint64_t data_offset_ = 0;
  uint64_t record_bytes_ = 0;
  uint64_t row_bytes_ = 0;
};

}  // namespace tq::eval
