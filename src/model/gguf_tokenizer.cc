#include "model/gguf_tokenizer.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace tq {

namespace {

using nlohmann::json;

// llama.cpp token types (tokenizer.ggml.token_type).
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Split regexes as the models' own tokenizer.json files spell them (llama.cpp rewrites the
// (?i:...) groups for its own engine; the HF `tokenizers` engine takes the originals).
constexpr const char* kGpt2Split =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class PreKind { kDefault, kGpt2, kDigitsGpt2, kLlama3, kLlama3NoIgnore, kQwen2 };

// llama.cpp pre-tokenizer names (llama-vocab.cpp) and the regex family each one selects.
struct PreName {
  std::string_view name;
  PreKind kind;
};
constexpr PreName kPreNames[] = {
    {"default", PreKind::kDefault},
    {"gpt-2", PreKind::kGpt2},
    {"phi-2", PreKind::kGpt2},
    {"mpt", PreKind::kGpt2},
    {"olmo", PreKind::kGpt2},
    {"exaone4", PreKind::kGpt2},
    {"smollm", PreKind::kDigitsGpt2},
    {"starcoder", PreKind::kDigitsGpt2},
    {"refact", PreKind::kDigitsGpt2},
    {"codeshell", PreKind::kDigitsGpt2},
    {"llama3", PreKind::kLlama3},
    {"llama-v3", PreKind::kLlama3},
    {"llama-bpe", PreKind::kLlama3},
    {"falcon3", PreKind::kLlama3},
    {"pixtral", PreKind::kLlama3},
    {"dbrx", PreKind::kLlama3NoIgnore},
    {"smaug-bpe", PreKind::kLlama3NoIgnore},
    {"qwen2", PreKind::kQwen2},
    {"deepseek-r1-qwen", PreKind::kQwen2},
    {"megrez", PreKind::kQwen2},
};

json byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

json split(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

json sequence(json list) { return {{"type", "Sequence"}, {"pretokenizers", std::move(list)}}; }

json added_token(int64_t id, std::string_view content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

using MergeList = std::vector<std::pair<std::string_view, std::string_view>>;

// SentencePiece BPE stores scores, not merges. Rebuild them as HF's converter does: every split
// of a piece (at code point boundaries) into two vocabulary pieces, ranked by the piece's score,
// best first; ties by longer left part, then longer right part, then vocabulary order.
MergeList merges_from_scores(const std::vector<std::string_view>& tokens,
                             const std::vector<double>& scores,
                             const std::unordered_map<std::string_view, int64_t>& ids) {
  struct Cand {
    double score;
    size_t len_l, len_r;
    int64_t id_l, id_r;
    std::string_view l, r;
  };
  std::vector<Cand> all;
  for (size_t id = 0; id < tokens.size(); ++id) {
    std::string_view t = tokens[id];
    std::vector<size_t> cuts;  // byte offsets of code point starts after the first
    for (size_t i = 1; i < t.size(); ++i)
      if ((static_cast<unsigned char>(t[i]) & 0xC0) != 0x80) cuts.push_back(i);
    std::vector<Cand> local;
    for (size_t k = 0; k < cuts.size(); ++k) {
      std::string_view l = t.substr(0, cuts[k]), r = t.substr(cuts[k]);
      auto il = ids.find(l), ir = ids.find(r);
      if (il == ids.end() || ir == ids.end()) continue;
      local.push_back({scores[id], k + 1, cuts.size() - k, il->second, ir->second, l, r});
    }
    std::sort(local.begin(), local.end(), [](const Cand& a, const Cand& b) {
      return std::pair(a.id_l, a.id_r) < std::pair(b.id_l, b.id_r);
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Cand& a, const Cand& b) {
    return std::tuple(a.score, a.len_l, a.len_r) > std::tuple(b.score, b.len_l, b.len_r);
  });
  MergeList out;
  out.reserve(all.size());
  for (const auto& c : all) out.emplace_back(c.l, c.r);
  return out;
}

}  // namespace

Result<HfPreTokenizer> hf_pre_tokenizer(std::string_view pre, const std::string& path) {
  auto it = std::find_if(std::begin(kPreNames), std::end(kPreNames),
                         [&](const PreName& p) { return p.name == pre; });
  if (it == std::end(kPreNames))
    return err("{}: llama.cpp pre-tokenizer '{}' is not supported", path, pre);
  HfPreTokenizer h;
  h.normalizer = nullptr;
  switch (it->kind) {
    case PreKind::kDefault:  // llama.cpp applies these four splits in turn
      h.pre_tokenizer =
          sequence({split(R"([\p{P}\$\+<=>\^~\|]+)"), split(kGpt2Split), split(R"(\p{N}+)"),
                    split("[0-9][0-9][0-9]"), byte_level(false, true, false)});
      break;
    case PreKind::kGpt2:
      h.pre_tokenizer = byte_level(false, true, true);
      break;
    case PreKind::kDigitsGpt2:  // as SmolLM2's / StarCoder's own tokenizer.json
      h.pre_tokenizer = sequence(
          {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(false, true, true)});
      break;
    case PreKind::kLlama3:
    case PreKind::kLlama3NoIgnore:
      h.pre_tokenizer = sequence({split(kLlama3Split), byte_level(false, true, false)});
      h.ignore_merges = h.add_bos_default = it->kind == PreKind::kLlama3;
      break;
    case PreKind::kQwen2:  // Qwen's tokenizer.json also NFC-normalizes (llama.cpp does not)
      h.normalizer = {{"type", "NFC"}};
      h.pre_tokenizer = sequence({split(kQwen2Split), byte_level(false, false, false)});
      break;
  }
  return h;
}

Result<HfTokenizerFiles> gguf_hf_tokenizer(const GgufFile& f) {
  const std::string& path = f.path();
  TQ_TRY(auto model, f.get_string("tokenizer.ggml.model"));
  if (!model) return err("{}: no tokenizer (metadata 'tokenizer.ggml.model' missing)", path);
  const bool spm = *model == "llama";  // SentencePiece BPE with byte fallback
  if (!spm && *model != "gpt2")
    return err(
        "{}: tokenizer model '{}' is not supported yet (supported: 'gpt2' byte-level BPE, "
        "'llama' SentencePiece BPE)",
        path, *model);
  HfPreTokenizer pt;
  TQ_TRY(auto add_space_prefix, f.get_bool("tokenizer.ggml.add_space_prefix"));
  if (spm) {
    // llama.cpp: prefix one space (unless disabled), then spaces become U+2581.
    json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    pt.normalizer =
        add_space_prefix.value_or(true)
            ? json{{"type", "Sequence"},
                   {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace}}}
            : replace;
    pt.pre_tokenizer = nullptr;
    pt.add_bos_default = true;
  } else {
    TQ_TRY(auto pre, f.get_string("tokenizer.ggml.pre"));
    TQ_TRY(pt, hf_pre_tokenizer(pre.value_or("default"), path));
  }

  TQ_TRY(auto tokens, f.get_string_array("tokenizer.ggml.tokens"));
  TQ_TRY(auto types, f.get_int_array("tokenizer.ggml.token_type"));
  TQ_TRY(auto merges, f.get_string_array("tokenizer.ggml.merges"));
  if (tokens.empty()) return err("{}: tokenizer.ggml.tokens is missing or empty", path);
  if (!types.empty() && types.size() != tokens.size())
    return err("{}: tokenizer.ggml.token_type has {} entries for {} tokens", path, types.size(),
               tokens.size());

  json vocab = json::object();
  json added = json::array();
  json added_decoder = json::object();
  std::unordered_map<std::string_view, int64_t> seen;
  for (size_t id = 0; id < tokens.size(); ++id) {
    auto [pos, fresh] = seen.emplace(tokens[id], static_cast<int64_t>(id));
    if (!fresh) return err("{}: token {} '{}' repeats token {}", path, id, tokens[id], pos->second);
    vocab[std::string(tokens[id])] = id;
    int64_t type = types.empty() ? kNormal : types[id];
    if (type == kControl || type == kUserDefined || type == kUnknown) {
      bool special = type != kUserDefined;
      added.push_back(added_token(static_cast<int64_t>(id), tokens[id], special));
      json d = added.back();
      d.erase("id");
      added_decoder[std::to_string(id)] = std::move(d);
    }
  }
  json merge_pairs = json::array();
  if (spm && merges.empty()) {
    TQ_TRY(auto scores, f.get_float_array("tokenizer.ggml.scores"));
    if (scores.size() != tokens.size())
      return err("{}: tokenizer.ggml.scores has {} entries for {} tokens", path, scores.size(),
                 tokens.size());
    for (const auto& [l, r] : merges_from_scores(tokens, scores, seen))
      merge_pairs.push_back({l, r});
  }
  for (size_t k = 0; k < merges.size(); ++k) {
    auto sp = merges[k].find(' ');
    if (sp == std::string_view::npos || merges[k].find(' ', sp + 1) != std::string_view::npos)
      return err("{}: merge {} '{}' is not two tokens separated by one space", path, k, merges[k]);
    merge_pairs.push_back({merges[k].substr(0, sp), merges[k].substr(sp + 1)});
  }

  // Special tokens by id, as llama.cpp reads them.
  auto token_at = [&](const char* key) -> Result<std::optional<std::pair<int64_t, std::string>>> {
    TQ_TRY(auto id, f.get_int(key));
    if (!id) return std::optional<std::pair<int64_t, std::string>>();
    if (*id < 0 || *id >= static_cast<int64_t>(tokens.size()))
      return err("{}: {} = {} is not a token id (vocabulary has {})", path, key, *id,
                 tokens.size());
    return std::optional(std::pair(*id, std::string(tokens[*id])));
  };
  TQ_TRY(auto bos, token_at("tokenizer.ggml.bos_token_id"));
  TQ_TRY(auto eos, token_at("tokenizer.ggml.eos_token_id"));
  TQ_TRY(auto eot, token_at("tokenizer.ggml.eot_token_id"));
  TQ_TRY(auto unk, token_at("tokenizer.ggml.unknown_token_id"));
  TQ_TRY(auto pad, token_at("tokenizer.ggml.padding_token_id"));
  TQ_TRY(auto add_bos_kv, f.get_bool("tokenizer.ggml.add_bos_token"));
  TQ_TRY(auto add_eos_kv, f.get_bool("tokenizer.ggml.add_eos_token"));
  bool add_bos = add_bos_kv.value_or(pt.add_bos_default);
  bool add_eos = add_eos_kv.value_or(false);
  if (add_bos && !bos) return err("{}: add_bos_token is set but there is no BOS token", path);
  if (add_eos && !eos) return err("{}: add_eos_token is set but there is no EOS token", path);

  // Post-processor: byte-level offsets, plus BOS/EOS when llama.cpp would add them.
  json post = spm ? json(nullptr) : byte_level(true, false, true);
  if (add_bos || add_eos) {
    json single = json::array(), pair = json::array(), specials = json::object();
    auto special = [&](const std::pair<int64_t, std::string>& t, int type_id) {
      specials[t.second] = {{"id", t.second}, {"ids", {t.first}}, {"tokens", {t.second}}};
      return json{{"SpecialToken", {{"id", t.second}, {"type_id", type_id}}}};
    };
    for (int side = 0; side < 2; ++side) {
      json& seq = side == 0 ? single : pair;
      for (int part = 0; part < (side == 0 ? 1 : 2); ++part) {
        if (add_bos) seq.push_back(special(*bos, part));
        seq.push_back({{"Sequence", {{"id", part == 0 ? "A" : "B"}, {"type_id", part}}}});
        if (add_eos) seq.push_back(special(*eos, part));
      }
    }
    json tp = {{"type", "TemplateProcessing"},
               {"single", single},
               {"pair", pair},
               {"special_tokens", specials}};
    post =
        spm ? tp : json{{"type", "Sequence"}, {"processors", {byte_level(true, false, true), tp}}};
  }
  json decoder = byte_level(true, true, true);
  if (spm) {
    decoder = {{"type", "Sequence"},
               {"decoders",
                {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                 {{"type", "ByteFallback"}},
                 {{"type", "Fuse"}}}}};
    if (add_space_prefix.value_or(true))
      decoder["decoders"].push_back(
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }

  HfTokenizerFiles out;
  out.tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", pt.normalizer},
      {"pre_tokenizer", pt.pre_tokenizer},
      {"post_processor", post},
      {"decoder", decoder},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", spm && unk ? json(unk->second) : json(nullptr)},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", spm},
        {"byte_fallback", spm},
        {"ignore_merges", pt.ignore_merges},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merge_pairs)}}},
  };

  json& tc = out.tokenizer_config;
  json& sm = out.special_tokens_map;
  tc["add_bos_token"] = add_bos;
  tc["add_eos_token"] = add_eos;
  tc["added_tokens_decoder"] = added_decoder;
  tc["clean_up_tokenization_spaces"] = false;
  tc["tokenizer_class"] = "PreTrainedTokenizerFast";
  tc["model_input_names"] = {"input_ids", "attention_mask"};
  TQ_TRY(auto arch, f.get_string("general.architecture"));
  if (arch) {
    TQ_TRY(auto ctx, f.get_int(std::string(*arch) + ".context_length"));
    if (ctx) tc["model_max_length"] = *ctx;
  }
  TQ_TRY(auto tmpl, f.get_string("tokenizer.chat_template"));
  if (tmpl) tc["chat_template"] = *tmpl;
  const std::pair<const char*, const std::optional<std::pair<int64_t, std::string>>*> named[] = {
      {"bos_token", &bos}, {"eos_token", &eos}, {"unk_token", &unk}, {"pad_token", &pad}};
  for (const auto& [key, tok] : named) {
    if (!*tok) continue;
    tc[key] = (*tok)->second;
    sm[key] = {{"content", (*tok)->second},
               {"lstrip", false},
               {"normalized", false},
               {"rstrip", false},
               {"single_word", false}};
  }

  json& gc = out.generation_config;
  if (bos) gc["bos_token_id"] = bos->first;
  if (eos) {
    // Chat models often stop on an end-of-turn token too; mlx-lm reads the list from here.
    if (eot && eot->first != eos->first)
      gc["eos_token_id"] = {eos->first, eot->first};
    else
      gc["eos_token_id"] = eos->first;
  }
  if (pad) gc["pad_token_id"] = pad->first;
  return out;
}

}  // namespace tq
