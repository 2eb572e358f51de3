// Each `tq` verb lives in its own cli/verb_<name>.cc and registers itself here.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "base/result.h"

namespace tq::cli {

// setup() declares the verb's flags on its subcommand and returns the function that runs it.
using VerbRun = std::function<Status()>;
struct VerbDef {
  std::string name;
  std::string help;
  int order;  // position in `tq --help`
  std::function<VerbRun(CLI::App&)> setup;
};

bool register_verb(VerbDef def);

}  // namespace tq::cli
