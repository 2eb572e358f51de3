// The tokenizer pipeline, in the order of the tokenizers crate: added tokens (raw), normalizer,
// added tokens (normalized), pre-tokenizer, BPE model, post-processor; decode runs the decoder.
#include "text/tokenizer.h"

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "text/added_vocab.h"
#include "text/bpe.h"
#include "text/decoder.h"
#include "text/json_fields.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"

namespace tq {

using namespace tq::text;

struct Tokenizer::Impl {
  Bpe model;
  AddedVocab added;
  std::optional<Normalizer> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  std::optional<PostProcessor> post_processor;
  std::optional<Decoder> decoder;
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

// Component objects nest (Sequence); deeper than this is hostile input, not a tokenizer.
constexpr int kMaxNesting = 64;

static bool too_deep(const json& j, int depth = 0) {
  if (depth > kMaxNesting) return true;
  if (j.is_object() || j.is_array()) {
    for (const json& c : j) {
      if ((c.is_object() || c.is_array()) && too_deep(c, depth + 1)) return true;
    }
  }
  return false;
}

// Fills `m` from the parsed tokenizer.json object.
template <typename Impl>
static Status build(const json& j, const std::string& source, Impl& m) {
  if (!j.is_object()) return err("{}: tokenizer.json must be a JSON object", source);
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) {
    if (const json* c = find_field(j, key); c && too_deep(*c)) {
      return err("{}: {} nests deeper than {} levels", source, key, kMaxNesting);
    }
  }
  const json* model = find_field(j, "model");
  if (!model || !model->is_object()) return err("{}: missing 'model' object", source);
  std::string type = "BPE";  // files from older tokenizers versions may omit the model type
  if (const json* ty = find_field(*model, "type")) {
    if (!ty->is_string()) return err("{}: model 'type' must be a string", source);
    type = ty->get<std::string>();
  } else if (!find_field(*model, "merges")) {
    return err("{}: model has no 'type' and no 'merges'; only BPE is supported", source);
  }
  if (type != "BPE") return err("{}: model type '{}' is not supported (only BPE)", source, type);
  TQ_TRY(m.model, Bpe::from_json(*model, source));
  static const json kNull;
  auto part = [&](const char* key) -> const json& {
    const json* p = find_field(j, key);
    return p ? *p : kNull;
  };
  TQ_TRY(m.normalizer, parse_normalizer(part("normalizer"), source));
  if (m.normalizer) TQ_CHECK_OK(check_normalizer_growth(*m.normalizer, source));
  TQ_TRY(m.pre_tokenizer, parse_pre_tokenizer(part("pre_tokenizer"), source));
  TQ_TRY(m.post_processor, parse_post_processor(part("post_processor"), source));
  TQ_TRY(m.decoder, parse_decoder(part("decoder"), source));
  // truncation and padding are ignored: transformers also disables them unless asked per call
  TQ_TRY(m.added, AddedVocab::from_json(part("added_tokens"), m.model,
                                        m.normalizer ? &*m.normalizer : nullptr, source));
  return ok_status();
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  try {
    json j = json::parse(json_text.begin(), json_text.end());
    Tokenizer t;
    Status st = build(j, source, *t.impl_);
    if (!st.ok()) return st.error();
    return t;
  } catch (const json::exception& e) {
    return err("{}: invalid tokenizer JSON: {}", source, e.what());
  } catch (const std::exception& e) {
    return err("{}: cannot load tokenizer: {}", source, e.what());
  }
}

Result<Tokenizer> Tokenizer::from_file(const std::string& tokenizer_json_path) {
  TQ_TRY(MappedFile f, MappedFile::open(tokenizer_json_path));
  auto bytes = f.bytes();
  return from_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                   tokenizer_json_path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& m = *impl_;
  std::string owned;
  if (!is_valid_utf8(text)) {  // invalid bytes become U+FFFD, as a Python str would have them
    owned = utf8_lossy(text);
    text = owned;
  }
  std::vector<int32_t> ids;
  BpeCache cache;
  std::vector<TextPiece> raw_pieces, norm_pieces;
  std::vector<TextSplit> splits;
  m.added.split(text, /*normalized_set=*/false, raw_pieces);
  for (const TextPiece& rp : raw_pieces) {
    if (rp.id >= 0) {
      ids.push_back(rp.id);
      continue;
    }
    std::string_view raw = text.substr(rp.start, rp.end - rp.start);
    std::string norm = m.normalizer ? m.normalizer->apply(raw) : std::string(raw);
    norm_pieces.clear();
    m.added.split(norm, /*normalized_set=*/true, norm_pieces);
    for (const TextPiece& np : norm_pieces) {
      if (np.id >= 0) {
        ids.push_back(np.id);
        continue;
      }
      splits.clear();
      splits.push_back({norm.substr(np.start, np.end - np.start), rp.start == 0 && np.start == 0});
      if (m.pre_tokenizer) m.pre_tokenizer->apply(splits);
      for (const TextSplit& s : splits) m.model.tokenize(s.text, ids, &cache);
    }
  }
  if (add_special && m.post_processor) m.post_processor->apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* t = m.added.content(id);
    if (!t) t = m.model.id_to_token(id);
    if (!t) continue;  // unknown ids are skipped, as tokenizers does
    if (skip_special && m.added.is_special(id)) continue;
    tokens.push_back(*t);
  }
  std::string out;
  if (m.decoder) {
    m.decoder->apply(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) out += ' ';
      out += tokens[k];
    }
  }
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return std::max<int64_t>(impl_->model.id_bound(), int64_t{impl_->added.max_id()} + 1);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.id_of(token)) return id;
  return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const std::string* t = impl_->added.content(id)) return *t;
  if (const std::string* t = impl_->model.id_to_token(id)) return *t;
  return {};
}

bool Tokenizer::is_special(int32_t id) const { return impl_->added.is_special(id); }

bool Tokenizer::byte_level_decoder() const {
  return impl_->decoder && impl_->decoder->kind == text::Decoder::Kind::kByteLevel;
}

}  // namespace tq
