#include "text/pre_tokenizer.h"

#include <algorithm>
#include <array>

#include "text/json_fields.h"
#include "text/unicode.h"

namespace tq::text {

namespace {

// GPT-2's pre-tokenization pattern, used by ByteLevel when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> to_byte;  // every stand-in code point is below 512
  ByteTables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(to_unicode[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

// One segment of a split: [start, end) and whether the pattern matched it.
struct Segment {
  size_t start, end;
  bool match;
};

// Applies a split behavior to segments covering the text; returns the ranges to keep.
std::vector<std::pair<size_t, size_t>> apply_behavior(const std::vector<Segment>& segs,
                                                      SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  bool previous = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : segs) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : segs) {
        if (!s.match) out.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : segs) {
        if (s.match == previous && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous = s.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : segs) {
        if (s.match && !previous && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous = s.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !previous && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

std::vector<Segment> regex_segments(const Regex& re, std::string_view s, bool invert) {
  std::vector<Segment> segs;
  size_t prev = 0;
  for (auto [a, b] : re.find_all(s)) {
    if (prev != a) segs.push_back({prev, a, invert});
    segs.push_back({a, b, !invert});
    prev = b;
  }
  if (prev != s.size()) segs.push_back({prev, s.size(), invert});
  return segs;
}

// Segments for a per-character predicate: each matching character is its own segment.
template <typename Pred>
std::vector<Segment> char_segments(std::string_view s, Pred pred) {
  std::vector<Segment> segs;
  size_t last = 0, i = 0;
  while (i < s.size()) {
    size_t start = i;
    char32_t cp = next_code_point(s, i);
    if (pred(cp)) {
      if (last < start) segs.push_back({last, start, false});
      segs.push_back({start, i, true});
      last = i;
    }
  }
  if (last < s.size()) segs.push_back({last, s.size(), false});
  return segs;
}

void emit_ranges(const TextSplit& parent, const std::vector<std::pair<size_t, size_t>>& ranges,
                 std::vector<TextSplit>& out) {
  for (auto [a, b] : ranges) {
    if (a >= b) continue;
    out.push_back({parent.text.substr(a, b - a), parent.at_origin && a == 0});
  }
}

const Regex& gpt2_regex() {
  static const Regex re = Regex::compile(kGpt2Pattern, "<builtin>").value();
  return re;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return byte_tables().to_unicode[b]; }

int unicode_to_byte(char32_t cp) { return cp < 512 ? byte_tables().to_byte[cp] : -1; }

void PreTokenizer::apply(std::vector<TextSplit>& splits) const {
  if (kind == Kind::kSequence) {
    for (const PreTokenizer& c : children) c.apply(splits);
    return;
  }
  std::vector<TextSplit> out;
  out.reserve(splits.size());
  for (TextSplit& sp : splits) {
    switch (kind) {
      case Kind::kByteLevel: {
        if (add_prefix_space && !sp.text.starts_with(' ')) sp.text.insert(0, 1, ' ');
        size_t first = out.size();
        if (use_regex) {
          emit_ranges(sp,
                      apply_behavior(regex_segments(gpt2_regex(), sp.text, false),
                                     SplitBehavior::kIsolated),
                      out);
        } else if (!sp.text.empty()) {
          out.push_back(std::move(sp));
        }
        for (size_t k = first; k < out.size(); ++k) {
          std::string mapped;
          mapped.reserve(out[k].text.size() * 2);
          for (unsigned char b : out[k].text) mapped += byte_to_unicode(b);
          out[k].text = std::move(mapped);
        }
        break;
      }
      case Kind::kSplit:
        emit_ranges(sp, apply_behavior(regex_segments(*regex, sp.text, invert), behavior), out);
        break;
      case Kind::kDigits:
        emit_ranges(sp,
                    apply_behavior(
                        char_segments(sp.text, is_numeric),
                        individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous),
                    out);
        break;
      case Kind::kMetaspace: {
        std::string text = replace_spaces(sp.text);
        bool prepend_here =
            prepend == Prepend::kAlways || (prepend == Prepend::kFirst && sp.at_origin);
        if (prepend_here && !text.starts_with(replacement)) text.insert(0, replacement);
        TextSplit t{std::move(text), sp.at_origin};
        if (split) {
          char32_t rep = 0;
          size_t i = 0;
          rep = next_code_point(replacement, i);
          emit_ranges(t,
                      apply_behavior(char_segments(t.text, [rep](char32_t c) { return c == rep; }),
                                     SplitBehavior::kMergedWithNext),
                      out);
        } else if (!t.text.empty()) {
          out.push_back(std::move(t));
        }
        break;
      }
      case Kind::kSequence:
        break;
    }
  }
  splits = std::move(out);
}

std::string PreTokenizer::replace_spaces(const std::string& s) const {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (char c : s) {
    if (c == ' ') {
      out += replacement;
    } else {
      out += c;
    }
  }
  return out;
}

Result<std::optional<PreTokenizer>> parse_pre_tokenizer(const nlohmann::json& j,
                                                        const std::string& source) {
  if (j.is_null()) return std::optional<PreTokenizer>();
  JsonWhere w{source, "pre_tokenizer"};
  TQ_TRY(std::string type, req_string(j, "type", w));
  w.what = "pre_tokenizer " + type;
  PreTokenizer p;
  if (type == "Sequence") {
    const json* list = find_field(j, "pretokenizers");
    if (!list || !list->is_array()) {
      return err("{}: {}: 'pretokenizers' must be a list", source, w.what);
    }
    for (const json& c : *list) {
      TQ_TRY(auto child, parse_pre_tokenizer(c, source));
      if (child) p.children.push_back(std::move(*child));
    }
  } else if (type == "ByteLevel") {
    p.kind = PreTokenizer::Kind::kByteLevel;
    TQ_TRY(p.add_prefix_space, opt_bool(j, "add_prefix_space", true, w));
    TQ_TRY(p.use_regex, opt_bool(j, "use_regex", true, w));
  } else if (type == "Split") {
    p.kind = PreTokenizer::Kind::kSplit;
    TQ_TRY(PatternSpec pat, req_pattern(j, "pattern", w));
    if (pat.is_regex) {
      TQ_TRY(p.regex, Regex::compile(pat.text, source));
    } else {
      TQ_TRY(p.regex, Regex::literal(pat.text, source));
    }
    TQ_TRY(std::string b, req_string(j, "behavior", w));
    if (b == "Removed") {
      p.behavior = SplitBehavior::kRemoved;
    } else if (b == "Isolated") {
      p.behavior = SplitBehavior::kIsolated;
    } else if (b == "MergedWithPrevious") {
      p.behavior = SplitBehavior::kMergedWithPrevious;
    } else if (b == "MergedWithNext") {
      p.behavior = SplitBehavior::kMergedWithNext;
    } else if (b == "Contiguous") {
      p.behavior = SplitBehavior::kContiguous;
    } else {
      return err("{}: {}: unknown behavior '{}'", source, w.what, b);
    }
    TQ_TRY(p.invert, opt_bool(j, "invert", false, w));
  } else if (type == "Digits") {
    p.kind = PreTokenizer::Kind::kDigits;
    TQ_TRY(p.individual_digits, opt_bool(j, "individual_digits", false, w));
  } else if (type == "Metaspace") {
    p.kind = PreTokenizer::Kind::kMetaspace;
    TQ_TRY(p.replacement, req_char(j, "replacement", w));
    TQ_TRY(p.split, opt_bool(j, "split", true, w));
    TQ_TRY(bool legacy_prefix, opt_bool(j, "add_prefix_space", true, w));
    p.prepend = legacy_prefix ? PreTokenizer::Prepend::kAlways : PreTokenizer::Prepend::kNever;
    TQ_TRY(auto scheme, opt_string(j, "prepend_scheme", w));
    if (scheme) {
      if (*scheme == "always") {
        p.prepend = PreTokenizer::Prepend::kAlways;
      } else if (*scheme == "never") {
        p.prepend = PreTokenizer::Prepend::kNever;
      } else if (*scheme == "first") {
        p.prepend = PreTokenizer::Prepend::kFirst;
      } else {
        return err("{}: {}: unknown prepend_scheme '{}'", source, w.what, *scheme);
      }
    }
  } else {
    return err("{}: pre_tokenizer type '{}' is not supported", source, type);
  }
  return std::optional<PreTokenizer>(std::move(p));
}

}  // namespace tq::text
