#include "text/bpe.h"

#include <queue>

#include "text/json_fields.h"
#include "text/unicode.h"

namespace tq::text {

namespace {

// Words longer than this are not cached (as the tokenizers crate's MAX_LENGTH).
constexpr size_t kMaxCachedWord = 256;

Result<std::pair<std::string, std::string>> parse_merge(const json& m, size_t rank,
                                                        const JsonWhere& w) {
  if (m.is_string()) {
    const std::string& line = m.get_ref<const std::string&>();
    size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
      return err("{}: {}: merge {} '{}' is not two tokens separated by one space", w.source, w.what,
                 rank, line);
    }
    return std::pair{line.substr(0, sp), line.substr(sp + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::pair{m[0].get<std::string>(), m[1].get<std::string>()};
  }
  return err("{}: {}: merge {} must be \"a b\" or [\"a\", \"b\"]", w.source, w.what, rank);
}

}  // namespace

Result<Bpe> Bpe::from_json(const json& model, const std::string& source) {
  JsonWhere w{source, "model BPE"};
  Bpe bpe;
  const json* vocab = find_field(model, "vocab");
  if (!vocab || !vocab->is_object()) return err("{}: model BPE: 'vocab' must be an object", source);
  int64_t max_id = -1;
  bpe.vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return err("{}: model BPE: vocab id of '{}' is not an integer", source, it.key());
    }
    int64_t id = it.value().get<int64_t>();
    if (it.value().is_number_unsigned() && it.value().get<uint64_t>() > uint64_t(kMaxTokenId)) {
      id = -1;
    }
    if (id < 0 || id > kMaxTokenId) {
      return err("{}: model BPE: vocab id of '{}' out of range [0, {}]", source, it.key(),
                 kMaxTokenId);
    }
    bpe.vocab_.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  bpe.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  bpe.has_token_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [tok, id] : bpe.vocab_) {
    bpe.id_to_token_[id] = tok;
    bpe.has_token_[id] = true;
  }

  TQ_TRY(bpe.unk_token_, opt_string(model, "unk_token", w));
  TQ_TRY(auto prefix, opt_string(model, "continuing_subword_prefix", w));
  TQ_TRY(auto suffix, opt_string(model, "end_of_word_suffix", w));
  bpe.prefix_ = prefix.value_or("");
  bpe.suffix_ = suffix.value_or("");
  TQ_TRY(bpe.fuse_unk_, opt_bool(model, "fuse_unk", false, w));
  TQ_TRY(bpe.byte_fallback_, opt_bool(model, "byte_fallback", false, w));
  TQ_TRY(bpe.ignore_merges_, opt_bool(model, "ignore_merges", false, w));
  if (const json* d = find_field(model, "dropout")) {
    if (!d->is_number() || d->get<double>() < 0.0 || d->get<double>() > 1.0) {
      return err("{}: model BPE: 'dropout' must be null or a number in [0, 1]", source);
    }
    if (d->get<double>() > 0.0) {
      return err("{}: model BPE: dropout {} is not supported (encoding would be random)", source,
                 d->get<double>());
    }
  }
  if (bpe.unk_token_ && !bpe.vocab_.count(*bpe.unk_token_)) {
    return err("{}: model BPE: unk_token '{}' is not in the vocabulary", source, *bpe.unk_token_);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bpe.vocab_.find(fmt::format("<0x{:02X}>", b));
    bpe.byte_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
  }

  const json* merges = find_field(model, "merges");
  if (merges && !merges->is_array()) return err("{}: model BPE: 'merges' must be an array", source);
  std::unordered_map<uint64_t, MergeInfo> merge_map;
  if (merges) {
    merge_map.reserve(merges->size());
    uint32_t rank = 0;
    for (const json& m : *merges) {
      // merges.txt heritage: "#version" lines are comments and take no rank
      if (m.is_string() && m.get_ref<const std::string&>().starts_with("#version")) continue;
      TQ_TRY(auto pair, parse_merge(m, rank, w));
      auto a = bpe.vocab_.find(pair.first);
      auto b = bpe.vocab_.find(pair.second);
      if (a == bpe.vocab_.end() || b == bpe.vocab_.end()) {
        return err("{}: model BPE: merge {} '{} {}' uses a token not in the vocabulary", source,
                   rank, pair.first, pair.second);
      }
      if (pair.second.size() < bpe.prefix_.size()) {
        return err("{}: model BPE: merge {} right side '{}' is shorter than the subword prefix",
                   source, rank, pair.second);
      }
      std::string merged = pair.first + pair.second.substr(bpe.prefix_.size());
      auto n = bpe.vocab_.find(merged);
      if (n == bpe.vocab_.end()) {
        return err("{}: model BPE: merge {} result '{}' is not in the vocabulary", source, rank,
                   merged);
      }
      // a repeated pair keeps its last rank, as a map built in file order does
      merge_map[pair_key(a->second, b->second)] = MergeInfo{rank, n->second};
      ++rank;
    }
  }
  bpe.table_.build(merge_map);
  return bpe;
}

static uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void Bpe::MergeTable::build(const std::unordered_map<uint64_t, MergeInfo>& m) {
  size_t cap = 16;
  while (cap < 2 * m.size()) cap *= 2;
  keys.assign(cap, kEmpty);
  values.assign(cap, MergeInfo{0, 0});
  mask = cap - 1;
  for (const auto& [k, v] : m) {
    uint64_t i = mix(k) & mask;
    while (keys[i] != kEmpty) i = (i + 1) & mask;
    keys[i] = k;
    values[i] = v;
  }
}

const Bpe::MergeInfo* Bpe::MergeTable::find(uint64_t key) const {
  if (keys.empty()) return nullptr;
  for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (keys[i] == key) return &values[i];
    if (keys[i] == kEmpty) return nullptr;
  }
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void Bpe::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  int32_t pending_unk = -1;  // an unk not yet emitted (it may fuse with the next)
  int32_t unk_id = unk_token_ ? vocab_.find(*unk_token_)->second : -1;
  std::string buf;
  size_t i = 0;
  while (i < word.size()) {
    size_t start = i;
    i = std::min(word.size(), start + utf8_len(static_cast<unsigned char>(word[start])));
    std::string_view ch = word.substr(start, i - start);
    std::string_view s = ch;
    if ((start > 0 && !prefix_.empty()) || (i == word.size() && !suffix_.empty())) {
      buf.clear();
      if (start > 0) buf += prefix_;
      buf += ch;
      if (i == word.size()) buf += suffix_;
      s = buf;
    }
    if (auto it = vocab_.find(s); it != vocab_.end()) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : s) ids.push_back(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
      pending_unk = unk_id;
    }
    // without an unk token an unknown character yields no id at all (as tokenizers does)
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
}

void Bpe::merge_all(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2 || n > size_t{INT32_MAX}) return;  // positions are int32 (2^31 symbols per word)
  // Queue entries ordered by (rank, position): lowest rank first, then leftmost.
  struct Entry {
    uint64_t order;  // rank << 32 | position
    int32_t new_id;
  };
  auto later = [](const Entry& a, const Entry& b) { return a.order > b.order; };
  auto entry = [](const MergeInfo& m, size_t pos) {
    return Entry{(uint64_t{m.rank} << 32) | pos, m.new_id};
  };
  std::vector<Entry> initial;
  initial.reserve(n);
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    if (i + 1 < n) {
      if (const MergeInfo* m = find_merge(ids[i], ids[i + 1])) initial.push_back(entry(*m, i));
    }
  }
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> queue(later, std::move(initial));
  while (!queue.empty()) {
    Entry top = queue.top();
    queue.pop();
    const auto pos = static_cast<uint32_t>(top.order & 0xFFFFFFFFu);
    if (!alive[pos] || next[pos] < 0) continue;
    int32_t right = next[pos];
    const MergeInfo* m = find_merge(ids[pos], ids[right]);
    if (!m || m->new_id != top.new_id) continue;  // stale entry: a neighbour merged first
    ids[pos] = top.new_id;
    alive[right] = 0;
    int32_t after = next[right];
    next[pos] = after;
    if (after >= 0) prev[after] = static_cast<int32_t>(pos);
    if (int32_t before = prev[pos]; before >= 0) {
      if (const MergeInfo* mb = find_merge(ids[before], ids[pos])) {
        queue.push(entry(*mb, static_cast<size_t>(before)));
      }
    }
    if (after >= 0) {
      if (const MergeInfo* ma = find_merge(ids[pos], ids[after])) {
        queue.push(entry(*ma, pos));
      }
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) ids[k++] = ids[i];
  }
  ids.resize(k);
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out, BpeCache* cache) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  bool cacheable = cache && word.size() <= kMaxCachedWord;
  if (cacheable) {
    if (auto it = cache->find(word); it != cache->end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  merge_all(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) cache->emplace(std::string(word), std::move(ids));
}

}  // namespace tq::text
