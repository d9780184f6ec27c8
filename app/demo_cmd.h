// `updraft demo`: the whole mission in one process on the built-in policy (app/demo/demo.h).
#pragma once

#include <CLI/CLI.hpp>

#include "app/demo/demo.h"

namespace updraft {

void add_demo_options(CLI::App& cmd, demo::DemoOptions& o);
int run_demo_cmd(const demo::DemoOptions& o);

}  // namespace updraft
