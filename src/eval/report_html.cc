// The HTML of `tq report`: inline SVG charts and tables, no scripts, no external resources.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "eval/report.h"

namespace tq::eval {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

namespace {

std::string esc(const std::string& s) { return html_escape(s); }

struct Point {
  double x, y;  // x: size in MB
  std::string artifact;
  double bpw = 0.0;
  bool pareto = false;
};

// Label positions that do not overlap: each label (estimated 6 px per character, 11 px tall)
// goes to the first vertical offset from its point that clears the labels placed before it.
std::vector<double> label_offsets(const std::vector<std::pair<double, double>>& at,
                                  const std::vector<size_t>& chars) {
  struct Box {
    double x0, x1, y0, y1;
  };
  std::vector<Box> placed;
  std::vector<double> dy(at.size(), -6.0);
  for (size_t i = 0; i < at.size(); ++i) {
    const double x0 = at[i].first + 8, x1 = x0 + 6.0 * static_cast<double>(chars[i]);
    for (double d : {-6.0, 14.0, -18.0, 26.0, -30.0, 38.0, -42.0, 50.0}) {
      const Box b{x0, x1, at[i].second + d - 10, at[i].second + d + 1};
      bool clear = true;
      for (const Box& p : placed)
        clear = clear && (b.x1 < p.x0 || b.x0 > p.x1 || b.y1 < p.y0 || b.y0 > p.y1);
      dy[i] = d;
      if (clear) break;
    }
    placed.push_back({x0, x1, at[i].second + dy[i] - 10, at[i].second + dy[i] + 1});
  }
  return dy;
}

// 1-2-5 steps giving about `want` ticks over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int want) {
  const double raw = (hi - lo) / std::max(want, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string fmt_tick(double v) {
  std::string s = fmt::format("{:.6g}", v);
  return s;
}

// One scatter chart: circles of class "pt" (Pareto points also "pareto"), one per artifact,
// and the Pareto staircase.
std::string chart(const std::string& id, const std::string& title, const std::string& ylabel,
                  std::vector<Point> pts, bool log_y) {
  const double W = 640, H = 380, ml = 78, mr = 24, mt = 34, mb = 52;
  std::string s = fmt::format(
      "<svg id=\"{}\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#fff\"/>\n"
      "<text x=\"{}\" y=\"20\" class=\"title\">{}</text>\n",
      esc(id), W, H, W, H, W, H, ml, esc(title));
  if (pts.empty()) return s + "<text x=\"200\" y=\"190\">no data</text></svg>\n";
  auto fy = [&](double y) { return log_y ? std::log10(std::max(y, 1e-12)) : y; };
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Point& p : pts) {
    x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
    y0 = std::min(y0, fy(p.y)), y1 = std::max(y1, fy(p.y));
  }
  const double px = std::max((x1 - x0) * 0.08, 0.1),
               py = std::max((y1 - y0) * 0.1, log_y ? 0.2 : 1e-3);
  x0 -= px, x1 += px, y0 -= py, y1 += py;
  auto sx = [&](double x) { return ml + (x - x0) / (x1 - x0) * (W - ml - mr); };
  auto sy = [&](double y) { return H - mb - (fy(y) - y0) / (y1 - y0) * (H - mt - mb); };
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"plot\"/>\n", ml, mt,
                   W - ml - mr, H - mt - mb);
  for (double t : nice_ticks(x0, x1, 8))
    s += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" class=\"grid\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" class=\"tick\" text-anchor=\"middle\">{4}</text>\n",
        sx(t), mt, H - mb, H - mb + 16, fmt_tick(t));
  std::vector<double> yt;
  if (log_y) {
    for (double e = std::ceil(y0); e <= y1; e += 1) yt.push_back(std::pow(10.0, e));
    if (yt.size() < 2)
      for (double e = std::floor(y0); e <= y1; e += 1)
        for (double m : {2.0, 5.0})
          if (std::log10(m) + e >= y0 && std::log10(m) + e <= y1)
            yt.push_back(m * std::pow(10.0, e));
  } else {
    yt = nice_ticks(y0, y1, 6);
  }
  for (double t : yt)
    s += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" class=\"tick\" text-anchor=\"end\">{5}</text>\n",
        ml, W - mr, sy(t), ml - 6, sy(t) + 4, fmt_tick(t));
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"middle\">size (MB; bits per "
      "weight, mlx-lm's definition, beside each point)</text>\n<text x=\"16\" y=\"{}\" "
      "class=\"axis\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 16 {})\">{}</text>\n",
      (ml + W - mr) / 2, H - 12, (mt + H - mb) / 2, (mt + H - mb) / 2, esc(ylabel));
  std::vector<std::pair<double, double>> xy;
  for (const Point& p : pts) xy.emplace_back(p.x, p.y);
  std::vector<bool> front = pareto_front(xy);
  std::vector<Point> stair;
  for (size_t i = 0; i < pts.size(); ++i) {
    pts[i].pareto = front[i];
    if (front[i]) stair.push_back(pts[i]);
  }
  std::sort(stair.begin(), stair.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  if (stair.size() > 1) {
    std::string d;
    for (size_t i = 0; i < stair.size(); ++i)
      d += fmt::format("{}{:.1f},{:.1f}", i ? " " : "", sx(stair[i].x), sy(stair[i].y));
    s += fmt::format("<polyline points=\"{}\" class=\"front\"/>\n", d);
  }
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  std::vector<std::pair<double, double>> at;
  std::vector<std::string> labels;
  std::vector<size_t> chars;
  for (const Point& p : pts) {
    at.emplace_back(sx(p.x), sy(p.y));
    labels.push_back(fmt::format("{} ({:.2f})", artifact_short_name(p.artifact), p.bpw));
    chars.push_back(labels.back().size());
  }
  const std::vector<double> dy = label_offsets(at, chars);
  for (size_t i = 0; i < pts.size(); ++i) {
    const Point& p = pts[i];
    s += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" class=\"pt{}\" data-artifact=\"{}\">"
        "<title>{}: {:.2f} MB, {:.4f} bpw, {:.5g}</title></circle>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"label\">{}</text>\n",
        sx(p.x), sy(p.y), p.pareto ? 6 : 5, p.pareto ? " pareto" : "", esc(p.artifact),
        esc(p.artifact), p.x, p.bpw, p.y, sx(p.x) + 8, sy(p.y) + dy[i], esc(labels[i]));
  }
  s += "</svg>\n";
  return s;
}

std::string opt_num(const std::optional<double>& v, const char* f = "{:.4f}") {
  return v ? fmt::format(fmt::runtime(f), *v) : std::string("—");
}

std::string group_html(const ReportGroup& g, size_t index) {
  // x is the size in bytes (Pareto too): untying a head adds parameters, so equal bpw is not
  // equal size.
  std::vector<Point> kl_pts, ppl_pts;
  for (const ReportArm& a : g.arms) {
    auto bpw = a.bpw();
    if (!bpw || !a.info || a.info->bytes == 0) continue;
    const double mb = static_cast<double>(a.info->bytes) / 1e6;
    if (auto k = a.mean_kl(); k && a.artifact != g.source)
      kl_pts.push_back({mb, *k, a.artifact, *bpw});
    if (auto p = a.ppl_value()) ppl_pts.push_back({mb, *p, a.artifact, *bpw});
  }
  std::vector<std::pair<double, double>> kxy;
  for (const Point& p : kl_pts) kxy.emplace_back(p.x, p.y);
  std::vector<bool> kl_front = pareto_front(kxy);
  std::string s =
      fmt::format("<section class=\"group\">\n<h2>Source model: {}</h2>\n", esc(g.source));
  if (kl_pts.empty() && ppl_pts.empty()) {
    s += "<p class=\"nodata\">Nothing to plot: no KL or perplexity measured with a known "
         "size.</p>\n";
  } else {
    s += "<div class=\"charts\">\n";
    if (!kl_pts.empty())
      s += chart(fmt::format("kl-{}", index), "Mean KL(source || artifact) vs size (log scale)",
                 "mean KL (nats/token)", kl_pts, true);
    if (!ppl_pts.empty())
      s += chart(fmt::format("ppl-{}", index), "Perplexity vs size (log scale)", "perplexity",
                 ppl_pts, true);
    s += "</div>\n";
  }
  s += "<table>\n<tr><th>artifact</th><th>recipe</th><th>bpw</th><th>GB</th>"
       "<th>PPL ±</th><th>mean KL</th><th>median KL</th><th>p99 KL</th><th>top-1</th>"
       "<th>decode tok/s</th><th>prefill tok/s</th><th>KL Pareto</th><th>task acc %</th></tr>\n";
  for (const ReportArm& a : g.arms) {
    bool on_front = false;
    for (size_t i = 0; i < kl_pts.size(); ++i)
      if (kl_pts[i].artifact == a.artifact) on_front = kl_front[i];
    auto top1 = json_number(a.kl, "top1_agreement");
    std::string ppl = a.ppl_value()
                          ? fmt::format("{:.3f} ± {:.3f}", *a.ppl_value(), a.ppl_se().value_or(0))
                          : "—";
    s += fmt::format(
        "<tr><td title=\"{0}\">{1}</td><td>{2}</td><td>{3}</td><td>{4}</td><td>{5}</td>"
        "<td>{6}</td><td>{7}</td><td>{8}</td><td>{9}</td><td>{10}</td><td>{11}</td><td>{12}"
        "</td><td>{13}</td></tr>\n",
        esc(a.artifact), esc(artifact_short_name(a.artifact)), esc(a.info ? a.info->recipe : "?"),
        opt_num(a.bpw()),
        a.info ? fmt::format("{:.4g}", static_cast<double>(a.info->bytes) / 1e9) : "—", ppl,
        opt_num(a.mean_kl(), "{:.5g}"), opt_num(json_number(a.kl, "median_kl"), "{:.5g}"),
        opt_num(json_number(a.kl, "p99_kl"), "{:.5g}"),
        top1 ? fmt::format("{:.2f}%", 100 * *top1) : "—",
        opt_num(json_number(a.bench, "decode_tok_s"), "{:.1f}"),
        opt_num(json_number(a.bench, "prefill_tok_s"), "{:.1f}"), on_front ? "★" : "",
        esc(task_summary(a)));
  }
  s += "</table>\n<h3>Protocols</h3>\n<ul class=\"protocols\">\n";
  for (const ReportArm& a : g.arms) {
    if (a.ppl && a.ppl->contains("protocol"))
      s += fmt::format("<li>{} ppl: <code>{}</code></li>\n", esc(artifact_short_name(a.artifact)),
                       esc(a.ppl->value("protocol", "")));
    if (a.kl && a.kl->contains("protocol"))
      s += fmt::format("<li>{} kl: <code>{}</code></li>\n", esc(artifact_short_name(a.artifact)),
                       esc(a.kl->value("protocol", "")));
    if (!a.tasks.empty())
      s += fmt::format("<li>{} eval: <code>tq eval</code> (docs/EVAL.md), acc; GSM8K strict</li>\n",
                       esc(artifact_short_name(a.artifact)));
  }
  s += "</ul>\n<h3>Provenance</h3>\n";
  for (const ReportArm& a : g.arms) {
    if (!a.info || !a.info->metadata) continue;
    s += fmt::format("<details><summary>{} — tq_metadata.json</summary><pre>{}</pre></details>\n",
                     esc(a.artifact), esc(a.info->metadata->dump(2)));
  }
  s += "</section>\n";
  return s;
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
svg.chart { background: #fff; border: 1px solid #ddd; }
svg .title { font-size: 14px; font-weight: bold; } svg .tick { font-size: 11px; fill: #555; }
svg .axis { font-size: 12px; } svg .label { font-size: 10px; fill: #333; }
svg .plot { fill: none; stroke: #999; } svg .grid { stroke: #eee; }
svg .pt { fill: #fff; stroke: #1f6fb2; stroke-width: 2; } svg .pt.pareto { fill: #d9480f; stroke: #d9480f; }
svg .front { fill: none; stroke: #d9480f; stroke-width: 1.5; stroke-dasharray: 4 3; }
table { border-collapse: collapse; margin-top: 16px; font-size: 13px; background: #fff; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; }
td:first-child, td:nth-child(2), th { text-align: left; }
pre { font-size: 11px; background: #f0f0f0; padding: 8px; overflow-x: auto; }
)";

}  // namespace

std::string render_report_html(const std::vector<ReportGroup>& groups, const std::string& db_path,
                               const std::string& generated_utc,
                               const std::vector<RunRecord>& runs) {
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>TurboQuant frontier report</title>\n<style>";
  s += kStyle;
  s += "</style>\n</head>\n<body>\n<h1>TurboQuant frontier report</h1>\n";
  s += fmt::format(
      "<p>Results database <code>{}</code>, generated {}. Baseline of every KL = the source "
      "model (dequantized when the source is quantized). Filled orange points are Pareto-optimal "
      "(no other artifact is both smaller and better).</p>\n",
      esc(db_path), esc(generated_utc));
  const std::string serve_load = render_serve_load_html(runs);
  if (groups.empty() && serve_load.empty()) s += "<p>The database holds no runs.</p>\n";
  for (size_t i = 0; i < groups.size(); ++i) s += group_html(groups[i], i);
  s += serve_load;
  s += "</body>\n</html>\n";
  return s;
}

}  // namespace tq::eval
