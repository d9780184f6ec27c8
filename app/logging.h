// Process-wide logging setup (spdlog). Roles log through spdlog's default logger; every line
// carries the time, level and, once roles exist, the policy/drafter versions they report.
#pragma once

#include <string>

namespace updraft {

// level: trace, debug, info, warn, error, critical, off. Throws Error on an unknown level.
void setup_logging(const std::string& level);

}  // namespace updraft
