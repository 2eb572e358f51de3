// tq record KIND MODEL --results FILE: rows measured outside tq's verbs (bench scripts) into
// the results database, with the model's fingerprint, tool version and machine computed here
// as for tq's own rows.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/verb.h"
#include "eval/report.h"
#include "eval/results_db.h"
#include "model/model_source.h"

namespace tq::cli {
namespace {

struct RecordOptions {
  std::string kind, model, results, protocol, db;
};

// One JSON object per non-empty line; errors name the line.
Result<std::vector<nlohmann::json>> read_rows(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return err("{}: cannot read", path);
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<nlohmann::json> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return err("{}:{}: not a JSON object", path, n);
    if (Status st = eval::check_serve_load_result(j); !st.ok())
      return err("{}:{}: {}", path, n, st.error().message);
    rows.push_back(std::move(j));
  }
  if (rows.empty()) return err("{}: no rows (one JSON object per line)", path);
  return rows;
}

Status run_record(const RecordOptions& o) {
  if (o.kind != eval::kServeLoadKind)
    return err("unknown kind '{}' (known: {})", o.kind, eval::kServeLoadKind);
  TQ_TRY(std::vector<nlohmann::json> rows, read_rows(o.results));
  TQ_TRY(ModelSource m, open_model(o.model));
  TQ_TRY(const std::string fingerprint, eval::model_fingerprint(m));
  const std::string path = o.db.empty() ? eval::default_results_db_path() : o.db;
  TQ_TRY(eval::ResultsDb db, eval::ResultsDb::open(path));
  for (const auto& j : rows) {
    eval::RunRecord r;
    r.kind = o.kind;
    r.artifact = o.model;
    r.model_fingerprint = fingerprint;
    r.protocol = o.protocol;
    r.result = j;
    TQ_TRY(int64_t id, db.append(r));
    (void)id;
  }
  fmt::print("recorded {} {} row{} in {}\n", rows.size(), o.kind, rows.size() == 1 ? "" : "s",
             path);
  return ok_status();
}

const bool kRegistered = register_verb(
    {"record", "Record rows measured by a bench script (serve_load) in the results database", 85,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<RecordOptions>();
       app.add_option("kind", o->kind, "what the rows are: serve_load")->required();
       app.add_option("model", o->model, "the model measured (its fingerprint is recorded)")
           ->required();
       app.add_option("--results", o->results,
                      "file of rows, one JSON object per line ('-': standard input)")
           ->required();
       app.add_option("--protocol", o->protocol, "how the rows were measured (the command)");
       app.add_option("--db", o->db,
                      "Results database (default: $XDG_DATA_HOME/turboquant/results.sqlite)");
       return [o] { return run_record(*o); };
     }});

}  // namespace
}  // namespace tq::cli
