#include "rollout/worker/confirmation.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <cstring>

namespace updraft {
namespace {

// Sets thread `t`'s scheduling policy; false, logged, when the system refuses.
bool set_policy(pthread_t t, int policy, const char* what) {
  sched_param p{};
  p.sched_priority = 0;
  const int rc = pthread_setschedparam(t, policy, &p);
  if (rc != 0)
    spdlog::warn("rollback confirmation: cannot run at {} priority ({})", what, std::strerror(rc));
  return rc == 0;
}

// Whether a thread may take idle priority and give it back: without CAP_SYS_NICE, Linux lets a
// thread leave SCHED_IDLE only as far as RLIMIT_NICE allows (nice 0 needs a limit of 20; the
// default is 0). Tried once, on a thread of its own.
bool probe_idle_round_trip() {
  bool ok = false;
  std::thread([&] {
    sched_param p{};
    ok = pthread_setschedparam(pthread_self(), SCHED_IDLE, &p) == 0 &&
         pthread_setschedparam(pthread_self(), SCHED_OTHER, &p) == 0;
  }).join();
  if (!ok)
    spdlog::warn(
        "rollback confirmation: this process may not leave idle priority once taken (RLIMIT_NICE, "
        "CAP_SYS_NICE); confirmations run at normal priority and the worker waits for them");
  return ok;
}

}  // namespace

bool BackgroundConfirmation::idle_priority() {
  static const bool ok = probe_idle_round_trip();
  return ok;
}

BackgroundConfirmation::BackgroundConfirmation(DrafterScorer scorer, std::shared_ptr<const DraftModel> candidate,
                                               std::shared_ptr<const DraftModel> previous,
                                               std::shared_ptr<const PolicyModel> policy,
                                               std::vector<TttSample> samples, int64_t depth,
                                               std::function<void()> on_done)
    : candidate_(std::move(candidate)),
      previous_(std::move(previous)),
      policy_(std::move(policy)),
      samples_(std::move(samples)),
      on_done_(std::move(on_done)),
      started_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this, scorer = std::move(scorer), depth] {
    start_.wait();
    run(scorer, depth);
  });
  // Set here, not by the thread itself, so that a hurry() right after cannot come first; the
  // thread starts scoring once it is set.
  if (idle_priority())
    idle_ = set_policy(thread_.native_handle(), SCHED_IDLE, "idle");
  start_.count_down();
}

BackgroundConfirmation::~BackgroundConfirmation() {
  if (thread_.joinable())
    thread_.join();
}

double BackgroundConfirmation::age_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

void BackgroundConfirmation::hurry() {
  if (idle_ && !done())
    idle_ = !set_policy(thread_.native_handle(), SCHED_OTHER, "normal");
}

BackgroundConfirmation::Result BackgroundConfirmation::wait() {
  if (thread_.joinable())
    thread_.join();
  return result_;
}

void BackgroundConfirmation::run(const DrafterScorer& scorer, int64_t depth) {
  omp_set_num_threads(1);  // no thread team beside the engine's
  result_.samples = samples_.size();
  try {
    result_.tau_new = scorer(*candidate_, *policy_, samples_, depth);
    result_.tau_old = scorer(*previous_, *policy_, samples_, depth);
  } catch (const std::exception& e) {
    result_.error = e.what();
  } catch (...) {
    result_.error = "an unknown exception";
  }
  result_.seconds = age_seconds();
  done_.store(true, std::memory_order_release);
  if (on_done_)
    on_done_();
}

}  // namespace updraft
