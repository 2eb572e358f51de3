// --db FILE / --no-db, declared once for every verb that records its result, and the one call
// that records a run (nothing under --no-db).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "base/result.h"
#include "eval/results_db.h"

namespace tq::cli {

struct DbFlags {
  std::string path;  // empty: the default database
  bool off = false;
};

// `what`: what a row records ("run", "artifact"), for --no-db's help.
inline void add_db_flags(CLI::App& app, DbFlags* f, const std::string& what = "run") {
  CLI::Option* db = app.add_option(
      "--db", f->path, "Results database (default: $XDG_DATA_HOME/turboquant/results.sqlite)");
  CLI::Option* off =
      app.add_flag("--no-db", f->off, "Do not record the " + what + " in the results database");
  db->excludes(off);
}

inline Status record_run(const DbFlags& f, const eval::RunRecord& r) {
  if (f.off) return ok_status();
  TQ_TRY(int64_t id, eval::append_run(f.path, r));
  (void)id;
  return ok_status();
}

}  // namespace tq::cli
