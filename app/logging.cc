#include "app/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.h"

namespace updraft {

void setup_logging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  UPD_REQUIRE(lvl != spdlog::level::off || level == "off")
      << "unknown log level '" << level << "' (use trace, debug, info, warn, error, critical, off)";
  auto logger = spdlog::stderr_color_mt("updraft");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(lvl);
}

}  // namespace updraft
