#include "eval/report.h"

#include <gtest/gtest.h>

namespace tq::eval {
namespace {

RunRecord run(const std::string& kind, const std::string& artifact, nlohmann::json result,
              std::optional<std::string> base = std::nullopt) {
  RunRecord r;
  r.kind = kind;
  r.artifact = artifact;
  r.base_artifact = base;
  r.result = std::move(result);
  return r;
}

TEST(Report, ParetoFront) {
  auto f = pareto_front({{4.5, 0.1}, {3.5, 0.3}, {4.6, 0.2}, {8.5, 0.001}, {3.5, 0.4}});
  EXPECT_EQ(f, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_EQ(pareto_front({{1, 1}, {1, 1}}), (std::vector<bool>{true, true}));
}

TEST(Report, GroupsBySourceAndKeepsTheLatestRows) {
  std::vector<RunRecord> runs = {
      run("ppl", "/m/base", {{"ppl", 10.0}, {"ppl_se", 0.1}}),
      run("ppl", "/m/q4", {{"ppl", 12.0}}),
      run("kl", "/m/q4", {{"mean_kl", 0.5}}, "/m/base"),
      run("kl", "/m/q4", {{"mean_kl", 0.05}}, "/m/base"),  // later row wins
      run("ppl", "/m/q4", {{"ppl", 11.0}, {"ppl_se", 0.2}}),
      run("ppl", "/m/conv", {{"ppl", 10.5}}),  // grouped through tq_metadata.json
      run("ppl", "/other/x", {{"ppl", 99.0}}),
      run("bench", "/m/q4", {{"decode_tok_s", 50.0}}),
  };
  auto probe = [](const std::string& p) -> std::optional<ArtifactInfo> {
    ArtifactInfo a;
    a.bpw = p == "/m/base" ? 16.0 : p == "/m/q4" ? 4.5 : p == "/m/conv" ? 3.9 : 8.0;
    a.bytes = 1000;
    a.params = 100;
    a.recipe = "r";
    if (p == "/m/conv")
      a.metadata = nlohmann::json{{"command", "convert"}, {"source", {{"path", "/m/base"}}}};
    return a;
  };
  std::vector<ReportGroup> g = gather_report(runs, probe);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].source, "/m/base");
  ASSERT_EQ(g[0].arms.size(), 3u);
  EXPECT_EQ(g[0].arms[0].artifact, "/m/conv");  // sorted by bpw
  EXPECT_EQ(g[0].arms[1].artifact, "/m/q4");
  EXPECT_EQ(*g[0].arms[1].mean_kl(), 0.05);
  EXPECT_EQ(*g[0].arms[1].ppl_value(), 11.0);
  EXPECT_EQ((*g[0].arms[1].bench)["decode_tok_s"], 50.0);
  EXPECT_FALSE(g[0].arms[0].mean_kl().has_value());
  EXPECT_EQ(g[1].source, "/other/x");

  const std::string html = render_report_html(g, "db.sqlite", "2025-01-01T00:00:00Z");
  EXPECT_NE(html.find("id=\"kl-0\""), std::string::npos);
  EXPECT_NE(html.find("data-artifact=\"/m/q4\""), std::string::npos);
  EXPECT_NE(html.find("11.000 ± 0.200"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg\"") == std::string::npos, false);
}

TEST(Report, EscapesArtifactNames) {
  std::vector<RunRecord> runs = {run("ppl", "/m/<b>&\"x", {{"ppl", 3.0}})};
  auto probe = [](const std::string&) -> std::optional<ArtifactInfo> {
    ArtifactInfo a;
    a.bpw = 4;
    return a;
  };
  const std::string html = render_report_html(gather_report(runs, probe), "d", "t");
  EXPECT_EQ(html.find("<b>&"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;&amp;&quot;x"), std::string::npos);
}

// Issue 28 item 4: a deleted artifact keeps the source its convert row recorded; a source with
// nothing to plot gets one line, not two empty charts; the Pareto front is in bytes.
TEST(Report, DeletedArtifactsKeepTheirSourceAndParetoIsInBytes) {
  std::vector<RunRecord> runs = {
      run("convert", "/gone/a", {{"bpw", 3.5}, {"bytes", 700}, {"params", 1600}}, "/m/base"),
      run("convert", "/gone/b", {{"bpw", 3.5}, {"bytes", 600}, {"params", 1371}}, "/m/base"),
      run("kl", "/gone/a", {{"mean_kl", 0.2}}, "/m/base"),
      run("kl", "/gone/b", {{"mean_kl", 0.3}}, "/m/base"),
      run("bench", "/lonely", {{"decode_tok_s", 5.0}}),
  };
  auto probe = [](const std::string& p) -> std::optional<ArtifactInfo> {
    if (p.rfind("/gone/", 0) == 0) return std::nullopt;  // directories deleted
    ArtifactInfo a;
    a.bpw = 16;
    a.bytes = 3200;
    return a;
  };
  std::vector<ReportGroup> g = gather_report(runs, probe);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].source, "/m/base");
  ASSERT_EQ(g[0].arms.size(), 3u);
  EXPECT_EQ(g[1].source, "/lonely");
  const std::string html = render_report_html(g, "db", "t");
  // Same bpw, different bytes: both are on the front (one smaller, the other better); by bpw
  // /gone/b would be dominated.
  const auto pareto = [&](const std::string& a) {
    const size_t i = html.find("data-artifact=\"" + a + "\"");
    return i != std::string::npos && html.rfind("pareto", i) > html.rfind("<circle", i);
  };
  EXPECT_TRUE(pareto("/gone/a"));
  EXPECT_TRUE(pareto("/gone/b"));
  EXPECT_EQ(html.find("id=\"kl-1\""), std::string::npos);
  EXPECT_NE(html.find("Nothing to plot"), std::string::npos);
  EXPECT_NE(html.find("(3.50)"), std::string::npos);  // bpw beside the point
  const std::string text = render_report_text(g);
  EXPECT_NE(text.find("source: /m/base"), std::string::npos);
}

// Issue 24: bench/serve_load.py's rows (tq record serve_load) get their own table in both
// reports and are not arms of the frontier.
TEST(Report, ServeLoadRowsGetTheirOwnTable) {
  nlohmann::json row = {{"arm", "tq"},          {"concurrency", 4},
                        {"requests", 32},       {"aggregate_tok_s", 98.5},
                        {"ttft_p50_ms", 812.4}, {"ttft_p99_ms", 2400.0},
                        {"itl_p50_ms", 21.3},   {"itl_p99_ms", 80.0},
                        {"load", 2.5},          {"commit", "abc1234"}};
  std::vector<RunRecord> runs = {run("ppl", "/m/q4", {{"ppl", 12.0}}),
                                 run(kServeLoadKind, "/m/llama1b.gguf", row)};
  runs[1].time_utc = "2026-12-02T09:00:00Z";
  runs[1].result["arm"] = "llama.cpp<x>";
  auto probe = [](const std::string&) -> std::optional<ArtifactInfo> { return std::nullopt; };
  std::vector<ReportGroup> g = gather_report(runs, probe);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].source, "/m/q4");
  const std::string text = render_serve_load_text(runs);
  EXPECT_NE(text.find("serving load"), std::string::npos);
  for (const char* cell : {"2026-12-02", "llama1b.gguf", "llama.cpp<x>", " 4 ", "98.5", "812",
                           "2400", "21.3", "80.0", "abc1234"})
    EXPECT_NE(text.find(cell), std::string::npos) << cell << "\n" << text;
  EXPECT_EQ(render_serve_load_text({runs[0]}), "");
  const std::string html = render_report_html(g, "d", "t", runs);
  EXPECT_NE(html.find("<h2>Serving load</h2>"), std::string::npos);
  EXPECT_NE(html.find("llama.cpp&lt;x&gt;"), std::string::npos);
  EXPECT_NE(render_report_html({}, "d", "t", {runs[1]}).find("Serving load"), std::string::npos);
  EXPECT_EQ(render_report_html({}, "d", "t", {runs[1]}).find("holds no runs"), std::string::npos);

  EXPECT_TRUE(check_serve_load_result(row).ok());
  for (const char* key : {"arm", "concurrency", "aggregate_tok_s", "itl_p99_ms"}) {
    nlohmann::json bad = row;
    bad.erase(key);
    Status st = check_serve_load_result(bad);
    ASSERT_FALSE(st.ok()) << key;
    EXPECT_NE(st.error().message.find(key), std::string::npos) << st.error().message;
  }
  nlohmann::json bad = row;
  bad["concurrency"] = 0;
  EXPECT_FALSE(check_serve_load_result(bad).ok());
  bad = row;
  bad["ttft_p99_ms"] = "fast";
  EXPECT_FALSE(check_serve_load_result(bad).ok());
  EXPECT_FALSE(check_serve_load_result(nlohmann::json::array()).ok());
}

}  // namespace
}  // namespace tq::eval
