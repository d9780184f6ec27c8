// The policy and initial drafter the demo runs on (app/demo/demo.h): the ones given, else the
// built-in small policy and its drafters shipped in models/, else the tiny preset trained into
// OUT/builtin on first use (about a minute).
#pragma once

#include <string>

#include "app/demo/demo.h"

namespace updraft::demo {

struct Models {
  std::string policy, drafter, name;
  // The drafter shipped for the built-in policy trained to convergence on the domain mix
  // (models/small-eagle3); empty for other policies. The strong reference starts from it.
  std::string converged_drafter;
};

bool is_curriculum(const DemoOptions& o);
Models resolve_models(const DemoOptions& o);

}  // namespace updraft::demo
