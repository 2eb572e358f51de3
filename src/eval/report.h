// `tq report`: the results database turned into one self-contained HTML page (inline SVG and
// CSS, no script, no network): per source model, the bpw-vs-KL and bpw-vs-PPL frontiers with
// the Pareto points marked, a table of every arm, and each artifact's provenance.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "eval/results_db.h"

namespace tq::eval {

// What the report reads from an artifact on disk (when it still exists).
struct ArtifactInfo {
  double bpw = 0;
  uint64_t bytes = 0;
  uint64_t params = 0;
  std::string recipe;                      // e.g. "affine 4-bit g64", "mixed (3 specs)", "bf16"
  std::optional<nlohmann::json> metadata;  // tq_metadata.json
};
using ArtifactProbe = std::function<std::optional<ArtifactInfo>(const std::string& path)>;
// Opens the model (headers only) and reads config.json's quantization and tq_metadata.json.
std::optional<ArtifactInfo> probe_artifact(const std::string& path);

// One artifact of a source model, with its latest measurements.
struct ReportArm {
  std::string artifact;
  std::optional<ArtifactInfo> info;
  std::optional<nlohmann::json> ppl;    // latest `tq ppl` result
  std::optional<nlohmann::json> kl;     // latest `tq kl` result against the group's source
  std::optional<nlohmann::json> bench;  // latest `tq bench` result
  // Latest `tq eval` accuracy per task ("gsm8k_chat" for GSM8K through the chat template):
  // acc (GSM8K: strict), from the arm's own rows, else the base side of a paired row.
  std::map<std::string, double> tasks;
  std::optional<double> bpw() const;
  std::optional<double> mean_kl() const;
  std::optional<double> ppl_value() const;
  std::optional<double> ppl_se() const;
};

struct ReportGroup {
  std::string source;  // the source model (base of the KL rows)
  std::vector<ReportArm> arms;
};

// Groups runs by source model: tq_metadata.json's "source" when present, else the base of the
// artifact's KL rows, else the artifact itself. Arms are sorted by bpw (unknown last).
std::vector<ReportGroup> gather_report(const std::vector<RunRecord>& runs,
                                       const ArtifactProbe& probe);

// Indices of the Pareto points among (x, y): no other point has x' <= x and y' <= y with one
// of them strict.
std::vector<bool> pareto_front(const std::vector<std::pair<double, double>>& pts);

// The last path component of an artifact ("…/q4/" -> "q4"), for tables and labels.
std::string artifact_short_name(const std::string& path);
// j[key] when j holds a number there.
std::optional<double> json_number(const std::optional<nlohmann::json>& j, const char* key);

// "arc_easy 45.2, mmlu 30.1" (percent), or "-" when the arm has no task accuracy.
std::string task_summary(const ReportArm& a);

// The arms as aligned plain-text tables (one per source model), for terminals and scripts/demo.
std::string render_report_text(const std::vector<ReportGroup>& groups);

// `runs`: the database's rows, for the sections that are not per artifact (serving load).
std::string render_report_html(const std::vector<ReportGroup>& groups, const std::string& db_path,
                               const std::string& generated_utc,
                               const std::vector<RunRecord>& runs = {});

// Rows recorded with `tq record serve_load` (bench/serve_load.py): one per server arm and
// concurrency level of a load run. Not artifacts of the frontier: gather_report skips them.
inline constexpr const char* kServeLoadKind = "serve_load";
// The fields the report reads from a serve_load result; the error names the first bad one.
Status check_serve_load_result(const nlohmann::json& j);
// The serve_load rows in database order as one aligned text table ("" when there are none).
std::string render_serve_load_text(const std::vector<RunRecord>& runs);
// The same as an HTML section ("" when there are none).
std::string render_serve_load_html(const std::vector<RunRecord>& runs);
std::string html_escape(const std::string& s);

}  // namespace tq::eval
