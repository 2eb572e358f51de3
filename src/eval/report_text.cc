// Plain-text rendering of the report's arms table (tq report --table).
#include <fmt/format.h>

#include <algorithm>

#include "eval/report.h"

namespace tq::eval {

namespace {

std::string num(const std::optional<double>& v, const char* f) {
  return v ? fmt::format(fmt::runtime(f), *v) : std::string("-");
}

}  // namespace

std::string render_report_text(const std::vector<ReportGroup>& groups) {
  std::string out;
  for (const ReportGroup& g : groups) {
    // KL Pareto front in bytes (untying adds parameters, so equal bpw is not equal size) over
    // the arms with both a size and a KL (the source itself excluded).
    std::vector<std::pair<double, double>> pts;
    std::vector<size_t> idx;
    for (size_t i = 0; i < g.arms.size(); ++i) {
      const ReportArm& a = g.arms[i];
      if (a.info && a.info->bytes > 0 && a.mean_kl() && a.artifact != g.source) {
        pts.emplace_back(static_cast<double>(a.info->bytes), *a.mean_kl());
        idx.push_back(i);
      }
    }
    std::vector<bool> front_pts = pareto_front(pts);
    std::vector<bool> front(g.arms.size(), false);
    for (size_t k = 0; k < idx.size(); ++k) front[idx[k]] = front_pts[k];

    std::vector<std::vector<std::string>> rows = {{"artifact", "recipe", "bpw", "MB", "PPL", "+-",
                                                   "mean KL", "top-1", "Pareto", "task acc %"}};
    for (size_t i = 0; i < g.arms.size(); ++i) {
      const ReportArm& a = g.arms[i];
      auto top1 = json_number(a.kl, "top1_agreement");
      rows.push_back(
          {artifact_short_name(a.artifact), a.info ? a.info->recipe : "?", num(a.bpw(), "{:.3f}"),
           a.info ? fmt::format("{:.1f}", static_cast<double>(a.info->bytes) / 1e6) : "-",
           num(a.ppl_value(), "{:.3f}"), num(a.ppl_se(), "{:.3f}"),
           num(a.artifact == g.source ? std::nullopt : a.mean_kl(), "{:.5f}"),
           top1 && a.artifact != g.source ? fmt::format("{:.1f}%", 100 * *top1) : "-",
           front[i] ? "*" : "", task_summary(a)});
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& r : rows)
      for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    out += fmt::format("source: {}\n", g.source);
    for (const auto& r : rows) {
      std::string line;
      for (size_t c = 0; c < r.size(); ++c) {
        // Names left-aligned, numbers right-aligned.
        line += c < 2 || c + 1 == r.size() ? fmt::format("{:<{}}", r[c], width[c])
                                           : fmt::format("{:>{}}", r[c], width[c]);
        if (c + 1 < r.size()) line += "  ";
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  return out;
}

}  // namespace tq::eval
