// SIGINT and SIGTERM as a stop request, for the daemons (`updraft buffer`, `updraft train`):
// while a StopSignals lives, either signal sets a flag that requested() reads (a daemon's main
// loop polls it and shuts down in order); destruction restores the previous handlers. Create it
// first thing, so a signal that arrives during startup is not lost to the default action.
// One at a time per process.
#pragma once

#include <csignal>

namespace updraft {

namespace detail {
inline volatile std::sig_atomic_t g_stop_requested = 0;
inline void on_stop_signal(int) { g_stop_requested = 1; }
}  // namespace detail

class StopSignals {
 public:
  StopSignals() {
    detail::g_stop_requested = 0;
    prev_int_ = std::signal(SIGINT, detail::on_stop_signal);
    prev_term_ = std::signal(SIGTERM, detail::on_stop_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, prev_int_ == SIG_ERR ? SIG_DFL : prev_int_);
    std::signal(SIGTERM, prev_term_ == SIG_ERR ? SIG_DFL : prev_term_);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const { return detail::g_stop_requested != 0; }

 private:
  void (*prev_int_)(int) = SIG_DFL;
  void (*prev_term_)(int) = SIG_DFL;
};

}  // namespace updraft
