// tq: one binary, one subcommand per verb. Library errors become one line on stderr.
#include <algorithm>
#include <cstdio>
#include <vector>

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
    tq::Status st = run();
    if (!st.ok()) {
      std::fprintf(stderr, "tq %s: error: %s\n", sub->get_name().c_str(),
                   st.error().message.c_str());
      return 1;
    }
    return 0;
  }
  return 2;
}
