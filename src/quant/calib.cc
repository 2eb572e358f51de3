#include "quant/calib.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_set>

#include "base/sha256.h"

namespace tq {

namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return err("{}: cannot open calibration file", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return err("{}: read error", path);
  return ss.str();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// FNV-1a over the ids of one window.
uint64_t window_hash(const int32_t* p, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) {
    uint32_t v = static_cast<uint32_t>(p[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xFF;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace

nlohmann::json CalibSet::info() const {
  return {{"rows", rows()},
          {"seq_len", seq_len},
          {"tokens", tokens.size()},
          {"sha256", sha256},
          {"seed", seed},
          {"corpus_tokens", corpus_tokens},
          {"corpus_rows", corpus_rows},
          {"files", files},
          {"shuffle", "fisher-yates mt19937_64"}};
}

Result<std::vector<std::string>> default_calib_files() {
  const char* env = std::getenv("TQ_CACHE");
  std::filesystem::path cache;
  if (env != nullptr && *env != '\0') {
    cache = env;
  } else {
    const char* home = std::getenv("HOME");
    cache = std::filesystem::path(home ? home : ".") / ".cache" / "turboquant";
  }
  const auto dir = cache / "npm" / "node_modules" / "@stdlib" / "datasets-sotu" / "data";
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path().string());
  if (ec || files.empty())
    return err("{}: default calibration corpus (SOTU) not found; run scripts/setup or pass --calib",
               dir.string());
  std::sort(files.begin(), files.end());
  return files;
}

Result<std::vector<std::string>> read_calib_texts(const std::string& path) {
  TQ_TRY(std::string data, read_file(path));
  if (!ends_with(path, ".jsonl")) return std::vector<std::string>{std::move(data)};
  std::vector<std::string> texts;
  size_t pos = 0;
  for (int64_t line = 1; pos < data.size(); ++line) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string_view l(data.data() + pos, end - pos);
    pos = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(l, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return err("{}: line {} is not valid JSON", path, line);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      return err("{}: line {} has no string field \"text\"", path, line);
    texts.push_back(j["text"].get<std::string>());
  }
  return texts;
}

Result<CalibSet> build_calib_set(const Tokenizer& tok, const CalibOptions& opt) {
  if (opt.seq_len < 1 || opt.tokens < 1)
    return err("calibration: --calib-tokens {} and --calib-seq-len {} must be positive", opt.tokens,
               opt.seq_len);
  CalibSet set;
  set.seq_len = opt.seq_len;
  set.seed = opt.seed;
  if (opt.files.empty()) {
    TQ_TRY(set.files, default_calib_files());
  } else {
    set.files = opt.files;
  }
  std::vector<int32_t> stream;
  for (const std::string& f : set.files) {
    TQ_TRY(std::vector<std::string> texts, read_calib_texts(f));
    for (const std::string& t : texts) {
      std::vector<int32_t> ids = tok.encode(t, /*add_special=*/false);
      stream.insert(stream.end(), ids.begin(), ids.end());
    }
  }
  set.corpus_tokens = static_cast<int64_t>(stream.size());
  set.corpus_rows = set.corpus_tokens / opt.seq_len;
  if (set.corpus_rows == 0)
    return err("{}: calibration text has {} tokens, fewer than one row of {}",
               set.files.empty() ? std::string("calibration") : set.files[0], set.corpus_tokens,
               opt.seq_len);
  std::vector<int64_t> order(static_cast<size_t>(set.corpus_rows));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::mt19937_64 rng(opt.seed);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
  const int64_t want = (opt.tokens + opt.seq_len - 1) / opt.seq_len;
  const int64_t keep = std::min(want, set.corpus_rows);
  set.tokens.reserve(static_cast<size_t>(keep * opt.seq_len));
  for (int64_t r = 0; r < keep; ++r) {
    const auto* p = stream.data() + order[r] * opt.seq_len;
    set.tokens.insert(set.tokens.end(), p, p + opt.seq_len);
  }
  Sha256 h;
  for (int32_t t : set.tokens) {
    const uint32_t v = static_cast<uint32_t>(t);
    const uint8_t b[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                          static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
    h.update(b);
  }
  set.sha256 = h.hex_digest();
  return set;
}

CalibOverlap calib_overlap(const CalibSet& calib, std::span<const int32_t> eval_tokens,
                           int shingle) {
  CalibOverlap o;
  o.shingle = shingle;
  if (shingle < 1 || calib.seq_len < shingle) return o;
  std::unordered_set<uint64_t> seen;
  for (int64_t r = 0; r < calib.rows(); ++r) {
    const int32_t* p = calib.row(r).data();
    for (int64_t s = 0; s + shingle <= calib.seq_len; ++s) seen.insert(window_hash(p + s, shingle));
  }
  for (size_t s = 0; s + shingle <= eval_tokens.size(); ++s) {
    ++o.eval_windows;
    o.shared_windows += seen.count(window_hash(eval_tokens.data() + s, shingle)) != 0;
  }
  return o;
}

}  // namespace tq
