// The report's serving-load section: the rows of bench/serve_load.py, recorded through
// `tq record serve_load`, as one table in the text and HTML reports.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "eval/report.h"

namespace tq::eval {
namespace {

using json = nlohmann::json;

constexpr const char* kNumbers[] = {"aggregate_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
                                    "itl_p99_ms"};

std::string number(const json& j, const char* key, const char* f) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  return fmt::format(fmt::runtime(f), j[key].get<double>());
}
std::string text(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "-";
}

// One row's cells, in the order of kHeader.
const std::vector<std::string> kHeader = {"date",       "model",      "arm",         "conc",
                                          "requests",   "tok/s",      "TTFT p50 ms", "TTFT p99 ms",
                                          "ITL p50 ms", "ITL p99 ms", "load",        "commit"};
std::vector<std::vector<std::string>> cells(const std::vector<RunRecord>& runs) {
  std::vector<std::vector<std::string>> rows;
  for (const RunRecord& r : runs) {
    if (r.kind != kServeLoadKind) continue;
    const json& j = r.result;
    rows.push_back({r.time_utc.substr(0, 10), artifact_short_name(r.artifact), text(j, "arm"),
                    number(j, "concurrency", "{:.0f}"), number(j, "requests", "{:.0f}"),
                    number(j, "aggregate_tok_s", "{:.1f}"), number(j, "ttft_p50_ms", "{:.0f}"),
                    number(j, "ttft_p99_ms", "{:.0f}"), number(j, "itl_p50_ms", "{:.1f}"),
                    number(j, "itl_p99_ms", "{:.1f}"), number(j, "load", "{:.1f}"),
                    text(j, "commit")});
  }
  return rows;
}

}  // namespace

Status check_serve_load_result(const json& j) {
  if (!j.is_object()) return err("a serve_load result must be a JSON object");
  if (!j.contains("arm") || !j["arm"].is_string() || j["arm"].get<std::string>().empty())
    return err("serve_load result: \"arm\" must be a non-empty string (the server measured)");
  if (!j.contains("concurrency") || !j["concurrency"].is_number_integer() ||
      j["concurrency"].get<int64_t>() < 1)
    return err("serve_load result: \"concurrency\" must be an integer >= 1");
  for (const char* k : kNumbers)
    if (!j.contains(k) || !j[k].is_number() || !std::isfinite(j[k].get<double>()) ||
        j[k].get<double>() < 0)
      return err("serve_load result: \"{}\" must be a number >= 0", k);
  return ok_status();
}

std::string render_serve_load_text(const std::vector<RunRecord>& runs) {
  auto rows = cells(runs);
  if (rows.empty()) return "";
  rows.insert(rows.begin(), kHeader);
  std::vector<size_t> width(kHeader.size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::string out = "serving load (bench/serve_load.py):\n";
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      const bool name = c < 3 || c + 1 == r.size();  // names left, numbers right
      line += name ? fmt::format("{:<{}}", r[c], width[c]) : fmt::format("{:>{}}", r[c], width[c]);
      if (c + 1 < r.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string render_serve_load_html(const std::vector<RunRecord>& runs) {
  const auto rows = cells(runs);
  if (rows.empty()) return "";
  std::string s =
      "<h2>Serving load</h2>\n<p>bench/serve_load.py: streamed completions at bounded "
      "concurrency on loopback, one row per server and level (aggregate completion tok/s over "
      "the level's wall time; time to first token and inter-token latency percentiles).</p>\n"
      "<table>\n<tr>";
  for (const auto& h : kHeader) s += "<th>" + html_escape(h) + "</th>";
  s += "</tr>\n";
  for (const auto& r : rows) {
    s += "<tr>";
    for (const auto& c : r) s += "<td>" + html_escape(c) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

}  // namespace tq::eval
