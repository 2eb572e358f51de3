// The results database: one SQLite file where every measurement appends a row, so numbers can
// be compared across models, tool versions and machines. Schema (version 1):
//
//   meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)   -- ('schema_version', '1')
//   runs(id INTEGER PRIMARY KEY,
//        time_utc TEXT NOT NULL,           -- ISO 8601, "2025-06-01T12:34:56Z"
//        kind TEXT NOT NULL,               -- 'ppl', 'kl' (later 'convert', 'bench')
//        artifact TEXT NOT NULL,           -- the model measured (kl: the candidate), as given
//        model_fingerprint TEXT NOT NULL,  -- model_fingerprint() of that model
//        base_artifact TEXT,               -- kl: the base model (NULL otherwise)
//        base_fingerprint TEXT,
//        protocol TEXT,                    -- the protocol string printed with the result
//        result TEXT NOT NULL,             -- the verb's whole --json object
//        tool_version TEXT NOT NULL,       -- TQ_VERSION
//        machine TEXT NOT NULL)            -- "hostname; CPU model name"
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "model/model_source.h"

namespace tq::eval {

inline constexpr int kResultsSchemaVersion = 1;

struct RunRecord {
  int64_t id = 0;        // set by the database
  std::string time_utc;  // filled with now when empty
  std::string kind;
  std::string artifact;
  std::string model_fingerprint;
  std::optional<std::string> base_artifact;
  std::optional<std::string> base_fingerprint;
  std::string protocol;
  nlohmann::json result;
  std::string tool_version = TQ_VERSION;
  std::string machine;  // filled with machine_description() when empty
};

class ResultsDb {
 public:
  ~ResultsDb();
  ResultsDb(ResultsDb&&) noexcept;
  ResultsDb& operator=(ResultsDb&&) noexcept;

  // Opens or creates the file (and its parent directories); errors name `path`.
  static Result<ResultsDb> open(const std::string& path);
  Result<int64_t> append(const RunRecord& r);  // returns the row id
  // Every run in id order, or those of one kind.
  Result<std::vector<RunRecord>> runs(const std::string& kind = "") const;
  const std::string& path() const { return path_; }

 private:
  ResultsDb() = default;
  struct Db;
  std::unique_ptr<Db> db_;
  std::string path_;
};

// Opens `path` (empty: the default path) and appends `r`; returns the row id.
Result<int64_t> append_run(const std::string& path, const RunRecord& r);

// $XDG_DATA_HOME/turboquant/results.sqlite, else ~/.local/share/turboquant/results.sqlite.
std::string default_results_db_path();
// "hostname; CPU model name" (from /proc/cpuinfo).
std::string machine_description();
std::string utc_now_iso();

// SHA-256 of config.json dumped canonically (sorted keys), then one line per tensor in name
// order: "name\tshape\tstorage\n" (e.g. "model.norm.weight\t[576]\tBF16"), then each weight
// file's hash_file_contents() in order: the same content gives the same value at any path.
Result<std::string> model_fingerprint(const ModelSource& m);

}  // namespace tq::eval
