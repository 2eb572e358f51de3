// tq: one binary, one subcommand per verb. Library errors become one line on stderr.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/comm.h"
#include "cli/verb.h"

namespace tq::cli {

static std::vector<VerbDef>& registry() {
  static std::vector<VerbDef> verbs;
  return verbs;
}

bool register_verb(VerbDef def) {
  registry().push_back(std::move(def));
  return true;
}

// When a rank dies, mpirun ends the others with SIGTERM: rank 0 says so in one line.
static char g_stopped_line[256];

static void on_mpirun_stop(int) {
  ssize_t n = ::write(2, g_stopped_line, std::strlen(g_stopped_line));
  (void)n;
  ::_exit(1);
}

static void report_mpirun_stop(const std::string& verb) {
  std::snprintf(g_stopped_line, sizeof g_stopped_line,
                "tq %s: error (rank 0): the mpirun job was stopped (a rank died or it was "
                "interrupted); finished work is kept, rerun with --resume to continue it\n",
                verb.c_str());
  struct sigaction sa = {};
  sa.sa_handler = on_mpirun_stop;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace tq::cli

int main(int argc, char** argv) {
  using namespace tq::cli;
  CLI::App app{"tq — TurboQuant: quantize, measure and run LLM checkpoints"};
  app.set_version_flag("--version", std::string("tq ") + TQ_VERSION);
  app.require_subcommand(1);
  auto verbs = registry();
  std::sort(verbs.begin(), verbs.end(),
            [](const VerbDef& a, const VerbDef& b) { return a.order < b.order; });
  std::vector<std::pair<CLI::App*, VerbRun>> subs;
  for (auto& v : verbs) {
    CLI::App* sub = app.add_subcommand(v.name, v.help);
    subs.emplace_back(sub, v.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : subs) {
    if (!sub->parsed()) continue;
    // Under mpirun every rank runs the verb; the library splits the work (docs/MPI.md).
    tq::Status st = tq::init_world();
    tq::Comm& comm = tq::world();
    if (comm.size() > 1 && comm.rank() == 0) report_mpirun_stop(sub->get_name());
    if (st.ok()) st = run();
    if (!st.ok()) {
      if (comm.size() > 1) {
        // One line from the failing rank, then every rank ends: none is left waiting on it.
        std::fprintf(stderr, "tq %s: error (rank %d of %d): %s\n", sub->get_name().c_str(),
                     comm.rank(), comm.size(), st.error().message.c_str());
        std::fflush(stderr);
        ::signal(SIGTERM, SIG_DFL);  // the abort ends this rank too: no second line
        comm.abort(1);
      }
      std::fprintf(stderr, "tq %s: error: %s\n", sub->get_name().c_str(),
                   st.error().message.c_str());
      return 1;
    }
    tq::finalize_world();
    return 0;
  }
  return 2;
}
