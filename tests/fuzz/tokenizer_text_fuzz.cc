// libFuzzer target: arbitrary text (any bytes) through fixed small tokenizers of the shapes we
// ship for (byte-level BPE with a Qwen-style split; SentencePiece-style BPE with byte fallback).
// Besides not crashing, decode(encode(x)) must give x back (x read as lossy UTF-8) where the
// pipeline is lossless by design.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace {

using nlohmann::json;

const char* kQwenSplit =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json added(int id, const char* content, bool special, bool lstrip = false, bool single = false) {
  return {{"id", id},         {"content", content},     {"single_word", single}, {"lstrip", lstrip},
          {"rstrip", lstrip}, {"normalized", !special}, {"special", special}};
}

// Byte-level vocabulary (256 stand-ins) plus a few merges over them.
json byte_level_model() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tq::text::byte_to_unicode(static_cast<unsigned char>(b))] = b;
  json merges = json::array();
  const char* pairs[][2] = {{"\xC4\xA0", "t"},
                            {"h", "e"},
                            {"\xC4\xA0t", "he"},
                            {"i", "n"},
                            {"e", "r"},
                            {"\xC4\xA0", "a"},
                            {"o", "n"},
                            {"1", "2"},
                            {"\xC4\xA0", "\xC4\xA0"},
                            {"\xC4\x8A", "\xC4\x8A"}};
  for (auto& p : pairs) {
    std::string merged = std::string(p[0]) + p[1];
    if (!vocab.contains(merged)) vocab[merged] = static_cast<int>(vocab.size());
    merges.push_back(json::array({p[0], p[1]}));
  }
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}};
}

tq::Tokenizer make(const json& j) {
  auto t = tq::Tokenizer::from_json(j.dump(), "embedded");
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    __builtin_trap();
  }
  return std::move(t).value();
}

struct Fixture {
  tq::Tokenizer byte_level, byte_level_normalized, sentencepiece;
  Fixture()
      : byte_level(make(byte_level_json(false))),
        byte_level_normalized(make(byte_level_json(true))),
        sentencepiece(make(sentencepiece_json())) {}

  static json byte_level_json(bool normalized) {
    json j = {{"model", byte_level_model()}};
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kQwenSplit}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    j["decoder"] = {{"type", "ByteLevel"}};
    j["added_tokens"] =
        json::array({added(300, "<|im_start|>", true), added(301, "<think>", false, false, true)});
    if (normalized) {
      j["normalizer"] = {{"type", "Sequence"},
                         {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
      j["added_tokens"].push_back(added(302, "<M>", false, true, true));
      j["pre_tokenizer"]["pretokenizers"].push_back(
          {{"type", "Digits"}, {"individual_digits", true}});
    }
    return j;
  }

  static json sentencepiece_json() {
    json vocab = {{"<unk>", 0}, {"<s>", 1}, {"\xE2\x96\x81", 2}};
    for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
    for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = static_cast<int>(vocab.size());
    vocab["\xE2\x96\x81t"] = static_cast<int>(vocab.size());
    vocab["th"] = static_cast<int>(vocab.size());
    json j = {{"model",
               {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", {"\xE2\x96\x81 t", "t h"}},
                {"unk_token", "<unk>"},
                {"fuse_unk", true},
                {"byte_fallback", true}}}};
    j["added_tokens"] = json::array({added(1, "<s>", true)});
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens",
         {{"<s>", {{"id", "<s>"}, {"ids", json::array({1})}, {"tokens", json::array({"<s>"})}}}}}};
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
    j["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    return j;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture f;
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string valid = tq::utf8_lossy(text);
  switch (data[0] % 3) {
    case 0: {  // byte-level, no normalizer: lossless
      auto ids = f.byte_level.encode(text, true);
      if (f.byte_level.decode(ids) != valid) __builtin_trap();
      break;
    }
    case 1: {  // normalized variant: only must not crash
      auto ids = f.byte_level_normalized.encode(text, true);
      (void)f.byte_level_normalized.decode(ids, true);
      break;
    }
    case 2: {  // SentencePiece-style: lossless unless "<s>" splits the text (Prepend per piece)
      auto ids = f.sentencepiece.encode(text, true);
      if (ids.empty() || ids[0] != 1) __builtin_trap();  // the BOS template is missing
      ids.erase(ids.begin());
      std::string back = f.sentencepiece.decode(ids);
      if (valid.find("<s>") == std::string::npos && back != valid) __builtin_trap();
      break;
    }
  }
  // the fuzz bytes read as token ids
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 <= size; i += 2) ids.push_back(data[i] | (data[i + 1] << 8));
  (void)f.sentencepiece.decode(ids);
  (void)f.byte_level.decode(ids, true);
  return 0;
}
