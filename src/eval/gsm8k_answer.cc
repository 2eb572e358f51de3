#include "eval/gsm8k_answer.h"

#include <regex>

namespace tq::eval {
namespace {

const char* kInvalid = "[invalid]";

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

std::string gsm8k_strict(const std::string& generation) {
  // ECMAScript backtracks as Python's re does, so the unescaped final '.' behaves the same.
  static const std::regex re(R"(The answer is (\-?[0-9\.\,]+).)");
  std::smatch m;
  if (!std::regex_search(generation, m, re)) return kInvalid;
  return strip(m[1].str());
}

std::string gsm8k_flexible(const std::string& generation) {
  static const std::regex re(R"((-?[$0-9.,]{2,})|(-?[0-9]+))");
  std::string last;
  bool any = false;
  for (auto it = std::sregex_iterator(generation.begin(), generation.end(), re);
       it != std::sregex_iterator(); ++it) {
    any = true;
    last = (*it)[1].matched && (*it)[1].length() > 0 ? (*it)[1].str() : (*it)[2].str();
  }
  return any && !last.empty() ? strip(last) : kInvalid;
}

std::string gsm8k_normalize(std::string s) {
  std::string out;
  for (char c : s)
    if (c != ',' && c != '$') out += c;
  size_t hash = out.rfind("#### ");
  if (hash != std::string::npos) out = out.substr(hash + 5);
  if (!out.empty() && out.back() == '.') out.pop_back();
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool gsm8k_match(const std::string& extracted, const std::string& reference) {
  return gsm8k_normalize(extracted) == gsm8k_normalize(reference);
}

std::string gsm8k_cut(const std::string& generation) {
  size_t cut = generation.size();
  for (const char* stop : {"Q:", "</s>", "<|im_end|>"}) cut = std::min(cut, generation.find(stop));
  return generation.substr(0, cut);
}

}  // namespace tq::eval
