// tq tokenize TOKENIZER --text FILE: token ids of a text (and the round trip through decode).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "cli/verb.h"
#include "model/model_tokenizer.h"
#include "text/tokenizer.h"

namespace tq::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text_file;
  std::string ids_file;
  bool add_special = false;
  bool json = false;
  bool decode = false;
  bool skip_special = false;
  bool each_line = false;
  bool json_lines = false;
};

Result<std::string> read_file(const std::string& path) {
  TQ_TRY(MappedFile f, MappedFile::open(path));
  auto b = f.bytes();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

Result<std::vector<int32_t>> parse_ids(const std::string& path, const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == '\r' || s[i] == '\t' || s[i] == ',') {
      ++i;
      continue;
    }
    size_t j = i;
    if (s[j] == '-') ++j;
    int64_t v = 0;
    size_t digits = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9' && digits < 12) {
      v = v * 10 + (s[j++] - '0');
      ++digits;
    }
    bool ends =
        j == s.size() || s[j] == ' ' || s[j] == '\n' || s[j] == '\r' || s[j] == '\t' || s[j] == ',';
    if (digits == 0 || digits >= 12 || !ends) {
      return err("{}: expected token ids separated by spaces, found '{}'", path,
                 s.substr(i, std::min<size_t>(j - i + 1, 20)));
    }
    if (s[i] == '-') v = -v;
    if (v < INT32_MIN || v > INT32_MAX) return err("{}: token id {} out of range", path, v);
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

std::string ids_line(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) out += ' ';
    out += std::to_string(ids[k]);
  }
  return out;
}

// Replaces invalid UTF-8 rather than failing: decoded text is always valid, input may not be.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status run_tokenize(const TokenizeOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  TQ_TRY(Tokenizer tok, load_tokenizer_any(o.tokenizer));
  auto t1 = std::chrono::steady_clock::now();
  double load_s = std::chrono::duration<double>(t1 - t0).count();

  if (!o.ids_file.empty()) {  // one id sequence per line, each decoded on its own
    TQ_TRY(std::string s, read_file(o.ids_file));
    std::string_view rest = s;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      TQ_TRY(auto ids, parse_ids(o.ids_file, std::string(rest.substr(0, nl))));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      std::string text = tok.decode(ids, o.skip_special);
      if (o.json) {
        fmt::print("{}\n", dump({{"text", text}, {"count", ids.size()}}));
      } else {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fputc('\n', stdout);
      }
    }
    return ok_status();
  }
  if (o.text_file.empty()) return err("tokenize: give --text FILE or --ids FILE");
  TQ_TRY(std::string text, read_file(o.text_file));

  std::vector<std::string_view> inputs;
  std::vector<std::string> decoded_lines;  // --json-lines: the strings the lines spell
  if (o.each_line || o.json_lines) {
    std::string_view rest = text;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      inputs.push_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  if (o.json_lines) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      nlohmann::json j = nlohmann::json::parse(inputs[k], nullptr, false);
      if (!j.is_string()) return err("{}: line {} is not a JSON string", o.text_file, k + 1);
      decoded_lines.push_back(j.get<std::string>());
    }
    for (size_t k = 0; k < inputs.size(); ++k) inputs[k] = decoded_lines[k];
  } else if (!o.each_line) {
    inputs.push_back(text);
  }
  for (std::string_view in : inputs) {
    auto e0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(in, o.add_special);
    double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    std::string decoded;
    if (o.decode) decoded = tok.decode(ids, o.skip_special);
    if (o.json) {
      nlohmann::json j = {{"ids", ids},
                          {"count", ids.size()},
                          {"bytes", in.size()},
                          {"encode_seconds", encode_s},
                          {"load_seconds", load_s}};
      if (o.decode) {
        j["decoded"] = decoded;
        j["roundtrip"] = decoded == in;
      }
      fmt::print("{}\n", dump(j));
    } else {
      fmt::print("{}\n", ids_line(ids));
      if (o.decode) {
        std::fwrite(decoded.data(), 1, decoded.size(), stdout);
        std::fputc('\n', stdout);
      }
    }
  }
  return ok_status();
}

const bool kRegistered = register_verb(
    {"tokenize", "Token ids of a text with a tokenizer.json (and the decode round trip)", 60,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<TokenizeOptions>();
       app.add_option("tokenizer", o->tokenizer,
                      "tokenizer.json, a directory that contains one, or a GGUF file")
           ->required();
       app.add_option("--text", o->text_file, "UTF-8 text file to encode");
       app.add_option("--ids", o->ids_file,
                      "Decode instead: a file of token ids, one sequence per line");
       app.add_flag("--add-special", o->add_special,
                    "Apply the post-processor (e.g. BOS), as add_special_tokens=True");
       app.add_flag("--decode", o->decode, "Also decode the ids and report the round trip");
       app.add_flag("--skip-special", o->skip_special, "Drop special tokens when decoding");
       app.add_flag("--each-line", o->each_line,
                    "Encode every line (split on \\n) separately; one output line each");
       app.add_flag("--json-lines", o->json_lines,
                    "Each line of the text file is a JSON string, encoded separately");
       app.add_flag("--json", o->json, "Print JSON: {\"ids\": [...], \"count\": N, ...}");
       return [o] { return run_tokenize(*o); };
     }});

}  // namespace
}  // namespace tq::cli
