// tq report [--db FILE] -o report.html: the frontier page from the results database.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "cli/verb.h"
#include "eval/report.h"
#include "eval/results_db.h"

namespace tq::cli {
namespace {

struct ReportOptions {
  std::string db, out = "report.html";
  bool json = false, table = false;
};

Status run_report(const ReportOptions& o) {
  const std::string path = o.db.empty() ? eval::default_results_db_path() : o.db;
  if (!std::filesystem::exists(path)) return err("{}: no results database", path);
  TQ_TRY(eval::ResultsDb db, eval::ResultsDb::open(path));
  TQ_TRY(std::vector<eval::RunRecord> runs, db.runs());
  std::vector<eval::ReportGroup> groups = eval::gather_report(runs, eval::probe_artifact);
  const std::string html = eval::render_report_html(groups, path, eval::utc_now_iso(), runs);
  const std::string tmp = o.out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return err("{}: cannot create", tmp);
    f << html;
    if (!f.flush()) return err("{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, o.out, ec);
  if (ec) return err("{}: cannot rename {} over it: {}", o.out, tmp, ec.message());
  size_t arms = 0;
  for (const auto& g : groups) arms += g.arms.size();
  if (o.table) {
    fmt::print("{}", eval::render_report_text(groups));
    const std::string serve_load = eval::render_serve_load_text(runs);
    if (!serve_load.empty()) fmt::print("{}{}", groups.empty() ? "" : "\n", serve_load);
  }
  if (o.json)
    fmt::print("{}\n", nlohmann::json{{"output", o.out},
                                      {"runs", runs.size()},
                                      {"sources", groups.size()},
                                      {"artifacts", arms}}
                           .dump());
  else
    fmt::print("wrote {}: {} runs, {} source models, {} artifacts\n", o.out, runs.size(),
               groups.size(), arms);
  return ok_status();
}

const bool kRegistered = register_verb(
    {"report", "HTML frontier report (bpw vs KL / PPL) from the results database", 60,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<ReportOptions>();
       app.add_option("--db", o->db,
                      "Results database (default: $XDG_DATA_HOME/turboquant/results.sqlite)");
       app.add_option("-o,--output", o->out, "HTML file to write")->capture_default_str();
       app.add_flag("--json", o->json, "Print one JSON object");
       app.add_flag("--table", o->table,
                    "Also print the arms as plain-text tables (artifact, recipe, bpw, MB, PPL, "
                    "mean KL, top-1, KL Pareto) and the serving-load rows");
       return [o] { return run_report(*o); };
     }});

}  // namespace
}  // namespace tq::cli
