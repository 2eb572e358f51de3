#include "eval/results_db.h"

#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "base/file_digest.h"
#include "base/sha256.h"
#include "formats/quant_spec.h"
#include "io/json_parse.h"

namespace tq::eval {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  id INTEGER PRIMARY KEY,
  time_utc TEXT NOT NULL,
  kind TEXT NOT NULL,
  artifact TEXT NOT NULL,
  model_fingerprint TEXT NOT NULL,
  base_artifact TEXT,
  base_fingerprint TEXT,
  protocol TEXT,
  result TEXT NOT NULL,
  tool_version TEXT NOT NULL,
  machine TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_model ON runs(model_fingerprint, kind);
)sql";

// Finalizes a prepared statement on every path out of a function.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

}  // namespace

struct ResultsDb::Db {
  sqlite3* h = nullptr;
  ~Db() { sqlite3_close(h); }
};

ResultsDb::~ResultsDb() = default;
ResultsDb::ResultsDb(ResultsDb&&) noexcept = default;
ResultsDb& ResultsDb::operator=(ResultsDb&&) noexcept = default;

Result<ResultsDb> ResultsDb::open(const std::string& path) {
  ResultsDb r;
  r.path_ = path;
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return err("{}: cannot create directory {}: {}", path, parent.string(), ec.message());
  r.db_ = std::make_unique<Db>();
  if (sqlite3_open_v2(path.c_str(), &r.db_->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK)
    return err("{}: cannot open results database: {}", path,
               r.db_->h ? sqlite3_errmsg(r.db_->h) : "out of memory");
  sqlite3* h = r.db_->h;
  sqlite3_busy_timeout(h, 10000);  // several tq runs may append at once
  char* msg = nullptr;
  std::string sql = std::string("BEGIN IMMEDIATE;") + kSchema +
                    fmt::format("INSERT OR IGNORE INTO meta VALUES('schema_version', '{}');COMMIT;",
                                kResultsSchemaVersion);
  if (sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : sqlite3_errmsg(h);
    sqlite3_free(msg);
    return err("{}: not a usable results database: {}", path, m);
  }
  Stmt st;
  sqlite3_prepare_v2(h, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st.s, nullptr);
  if (!st.s || sqlite3_step(st.s) != SQLITE_ROW)
    return err("{}: results database has no schema_version", path);
  std::string v = column_text(st.s, 0);
  if (v != std::to_string(kResultsSchemaVersion))
    return err("{}: results database schema version {} (this tq writes version {})", path, v,
               kResultsSchemaVersion);
  return r;
}

Result<int64_t> ResultsDb::append(const RunRecord& rec) {
  sqlite3* h = db_->h;
  Stmt st;
  const char* sql =
      "INSERT INTO runs(time_utc, kind, artifact, model_fingerprint, base_artifact, "
      "base_fingerprint, protocol, result, tool_version, machine) VALUES(?,?,?,?,?,?,?,?,?,?)";
  if (sqlite3_prepare_v2(h, sql, -1, &st.s, nullptr) != SQLITE_OK)
    return err("{}: {}", path_, sqlite3_errmsg(h));
  std::string time = rec.time_utc.empty() ? utc_now_iso() : rec.time_utc;
  std::string machine = rec.machine.empty() ? machine_description() : rec.machine;
  std::string result = rec.result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto text = [&](int i, const std::string& s) {
    sqlite3_bind_text(st.s, i, s.data(), int(s.size()), SQLITE_TRANSIENT);
  };
  auto opt = [&](int i, const std::optional<std::string>& s) {
    if (s)
      text(i, *s);
    else
      sqlite3_bind_null(st.s, i);
  };
  text(1, time);
  text(2, rec.kind);
  text(3, rec.artifact);
  text(4, rec.model_fingerprint);
  opt(5, rec.base_artifact);
  opt(6, rec.base_fingerprint);
  text(7, rec.protocol);
  text(8, result);
  text(9, rec.tool_version);
  text(10, machine);
  if (sqlite3_step(st.s) != SQLITE_DONE)
    return err("{}: cannot append run: {}", path_, sqlite3_errmsg(h));
  return int64_t(sqlite3_last_insert_rowid(h));
}

Result<std::vector<RunRecord>> ResultsDb::runs(const std::string& kind) const {
  sqlite3* h = db_->h;
  Stmt st;
  const char* sql =
      "SELECT id, time_utc, kind, artifact, model_fingerprint, base_artifact, base_fingerprint, "
      "protocol, result, tool_version, machine FROM runs WHERE ?1 = '' OR kind = ?1 ORDER BY id";
  if (sqlite3_prepare_v2(h, sql, -1, &st.s, nullptr) != SQLITE_OK)
    return err("{}: {}", path_, sqlite3_errmsg(h));
  sqlite3_bind_text(st.s, 1, kind.data(), int(kind.size()), SQLITE_TRANSIENT);
  std::vector<RunRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    RunRecord r;
    r.id = sqlite3_column_int64(st.s, 0);
    r.time_utc = column_text(st.s, 1);
    r.kind = column_text(st.s, 2);
    r.artifact = column_text(st.s, 3);
    r.model_fingerprint = column_text(st.s, 4);
    if (sqlite3_column_type(st.s, 5) != SQLITE_NULL) r.base_artifact = column_text(st.s, 5);
    if (sqlite3_column_type(st.s, 6) != SQLITE_NULL) r.base_fingerprint = column_text(st.s, 6);
    r.protocol = column_text(st.s, 7);
    TQ_TRY(r.result, parse_json(column_text(st.s, 8), path_));
    r.tool_version = column_text(st.s, 9);
    r.machine = column_text(st.s, 10);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return err("{}: {}", path_, sqlite3_errmsg(h));
  return out;
}

Result<int64_t> append_run(const std::string& path, const RunRecord& r) {
  TQ_TRY(ResultsDb db, ResultsDb::open(path.empty() ? default_results_db_path() : path));
  return db.append(r);
}

std::string default_results_db_path() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  std::string base;
  if (xdg && *xdg) {
    base = xdg;
  } else {
    const char* home = std::getenv("HOME");
    base = std::string(home && *home ? home : ".") + "/.local/share";
  }
  return base + "/turboquant/results.sqlite";
}

std::string machine_description() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  std::string cpu = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon != std::string::npos) cpu = line.substr(line.find_first_not_of(" \t", colon + 1));
    break;
  }
  return fmt::format("{}; {}", host, cpu);
}

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<std::string> model_fingerprint(const ModelSource& m) {
  Sha256 h;
  h.update(m.config_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  h.update("\n");
  for (const auto& t : m.tensors->tensors()) {
    std::string storage = t.mlx_quant ? quant_spec_str(*t.mlx_quant) : t.storage;
    h.update(fmt::format("{}\t{}\t{}\n", t.name, shape_str(t.shape), storage));
  }
  // The bytes too: two conversions with the same layout (RTN and GPTQ, rotated or not) differ
  // only there, and a stored result must never be taken for the other's.
  for (const auto& f : m.weight_files) {
    h.update("file\n");  // not its name: a GGUF's is the user's choice
    TQ_CHECK_OK(hash_file_contents(f, h));
  }
  return h.hex_digest();
}

}  // namespace tq::eval
