#include "text/added_vocab.h"

#include <algorithm>

#include "text/json_fields.h"
#include "text/normalizer.h"
#include "text/unicode.h"

namespace tq::text {

namespace {

size_t prev_char_start(std::string_view s, size_t i) {
  if (i == 0) return 0;
  --i;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = prev_char_start(s, s.size());
  return is_word_char(next_code_point(s, i));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  return is_word_char(next_code_point(s, i));
}

// Start of the run of white space that ends `s`.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t i = prev_char_start(s, end);
    size_t j = i;
    if (!is_white_space(next_code_point(s, j))) break;
    end = i;
  }
  return end;
}

// Length of the run of white space that starts `s`.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_white_space(next_code_point(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view pattern, int32_t token) {
  int32_t node = 0;
  for (unsigned char b : pattern) {
    auto& next = nodes[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::pair<uint8_t, int32_t>{b, -1});
    if (it != next.end() && it->first == b) {
      node = it->second;
    } else {
      int32_t fresh = static_cast<int32_t>(nodes.size());
      next.insert(it, {b, fresh});
      nodes.emplace_back();
      node = fresh;
    }
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // a repeated pattern: the first wins
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
}

std::pair<int32_t, size_t> AddedVocab::Trie::longest_at(std::string_view s, size_t i) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t k = i; k < s.size(); ++k) {
    const auto& next = nodes[node].next;
    auto b = static_cast<uint8_t>(s[k]);
    auto it = std::lower_bound(next.begin(), next.end(), std::pair<uint8_t, int32_t>{b, -1});
    if (it == next.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {nodes[node].token, k + 1 - i};
  }
  return best;
}

static bool same_token(const AddedToken& a, const AddedToken& b) {
  return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip &&
         a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special;
}

Result<AddedVocab> AddedVocab::from_json(const nlohmann::json& list, const Bpe& model,
                                         const Normalizer* normalizer, const std::string& source) {
  AddedVocab v;
  if (list.is_null()) return v;
  if (!list.is_array()) return err("{}: 'added_tokens' must be a list", source);
  JsonWhere w{source, "added_tokens"};
  std::vector<AddedToken> parsed;
  for (const json& t : list) {
    AddedToken tok;
    TQ_TRY(tok.content, req_string(t, "content", w));
    TQ_TRY(int64_t id, req_int(t, "id", 0, kMaxTokenId, w));
    TQ_TRY(tok.special, opt_bool(t, "special", false, w));
    TQ_TRY(tok.single_word, opt_bool(t, "single_word", false, w));
    TQ_TRY(tok.lstrip, opt_bool(t, "lstrip", false, w));
    TQ_TRY(tok.rstrip, opt_bool(t, "rstrip", false, w));
    TQ_TRY(tok.normalized, opt_bool(t, "normalized", !tok.special, w));
    tok.id = static_cast<int32_t>(id);
    if (!tok.content.empty()) parsed.push_back(std::move(tok));  // empty ones are ignored
  }
  // Trie order as tokenizers builds it: special tokens first (each content once), then the rest.
  std::vector<const AddedToken*> order;
  for (const AddedToken& t : parsed) {
    if (t.special && v.special_.insert(t.content).second) order.push_back(&t);
  }
  const int64_t vocab_len = model.entries();
  int64_t max_assigned = -1;
  for (AddedToken& t : parsed) {
    bool duplicate = false;
    if (auto it = v.by_content_.find(t.content); it != v.by_content_.end()) {
      duplicate = same_token(v.by_id_.at(it->second), t);
    }
    if (duplicate) continue;
    int64_t id;
    if (auto it = v.by_content_.find(t.content); it != v.by_content_.end()) {
      id = it->second;
    } else if (auto mid = model.token_to_id(t.content)) {
      id = *mid;
    } else if (max_assigned < 0) {
      id = vocab_len;
    } else {
      id = (max_assigned >= vocab_len || vocab_len == 0) ? max_assigned + 1 : vocab_len;
    }
    if (id > kMaxTokenId)
      return err("{}: added token '{}' gets id {} (too many)", source, t.content, id);
    max_assigned = std::max(max_assigned, id);
    t.id = static_cast<int32_t>(id);
    v.by_content_[t.content] = t.id;
    v.by_id_[t.id] = t;
    v.max_id_ = std::max(v.max_id_, t.id);
    if (!v.special_.count(t.content)) order.push_back(&t);
  }
  for (const AddedToken* t : order) {
    int32_t id = v.by_content_.at(t->content);
    if (!t->normalized) {
      v.raw_.insert(t->content, id);
    } else {
      std::string pattern = normalizer ? normalizer->apply(t->content) : t->content;
      if (!pattern.empty()) v.normalized_.insert(pattern, id);
    }
  }
  // decode gives a normalized token's normalized form, as tokenizers does
  for (auto& [id, t] : v.by_id_) {
    t.decoded = t.normalized && normalizer ? normalizer->apply(t.content) : t.content;
  }
  return v;
}

void AddedVocab::split(std::string_view text, bool normalized_set,
                       std::vector<TextPiece>& out) const {
  const Trie& trie = normalized_set ? normalized_ : raw_;
  size_t start_offset = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    auto [id, len] = trie.longest_at(text, i);
    if (id < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = by_id_.at(id);
    size_t start = i, stop = i + len;
    i = stop;  // the next search starts after this match, kept or not
    if (tok.single_word &&
        (ends_with_word(text.substr(0, start)) || starts_with_word(text.substr(stop)))) {
      continue;
    }
    if (tok.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (tok.rstrip) stop += leading_space_len(text.substr(stop));
    start = std::min(start, stop);
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

const std::string* AddedVocab::content(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second.decoded;
}

bool AddedVocab::is_special(int32_t id) const {
  auto it = by_id_.find(id);
  return it != by_id_.end() && special_.count(it->second.content);
}

std::optional<int32_t> AddedVocab::id_of(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tq::text
