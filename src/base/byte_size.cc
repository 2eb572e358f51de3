#include "base/byte_size.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <iterator>
#include <utility>

namespace tq {

Result<uint64_t> parse_byte_size(std::string_view text, std::string_view what) {
  auto bad = [&] {
    return err("{} '{}': expected a size such as 5GiB, 500MB or 1000000", what, text);
  };
  // Digits and one '.' only: from_chars alone would also take "inf", "nan" and exponents.
  size_t end = 0, digits = 0;
  bool dot = false;
  for (; end < text.size(); ++end) {
    const char c = text[end];
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (digits == 0) return bad();
  double v = 0;
  if (std::from_chars(text.data(), text.data() + end, v).ec != std::errc{}) return bad();
  const std::string_view unit = text.substr(end);
  constexpr std::pair<std::string_view, double> kUnits[] = {
      {"", 1},       {"B", 1},         {"KB", 1e3},        {"MB", 1e6},
      {"GB", 1e9},   {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
  for (const auto& [name, mult] : kUnits) {
    if (unit != name) continue;
    const double bytes = v * mult;
    if (!(bytes < 9223372036854775808.0)) return bad();  // int64 callers stay safe
    return static_cast<uint64_t>(bytes);
  }
  return bad();
}

std::string format_bytes(uint64_t bytes) {
  constexpr std::string_view kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) v /= 1024, ++u;
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", v, v < 10 ? 2 : v < 100 ? 1 : 0, kUnits[u]);
}

}  // namespace tq
