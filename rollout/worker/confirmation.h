// A rollback confirmation on a thread of its own (rollout/worker/rollback.h): both drafters are
// scored teacher-forced on the same recent completions while the new drafter keeps serving, so
// the engine thread does not stall for it (0.5-1.3 s for the built-in pair on the 2-core Xeon,
// far longer for a large drafter scored on the CPU beside a GPU engine).
//
// The thread runs with one OpenMP thread and at idle priority (Linux SCHED_IDLE): it takes the
// CPU time that the engine and the other threads leave. At normal priority it would take a core
// from the engine's thread team, whose barriers then wait on a descheduled thread: the built-in
// policy decoded 4-7x slower beside a scorer at normal priority, and at its usual speed (within
// the run-to-run noise) beside one at idle priority (docs/benchmarks.md, session 26). hurry()
// puts it back at normal priority, for an owner that has decided to wait for it. Where the
// process may not leave idle priority once taken (no CAP_SYS_NICE and RLIMIT_NICE below 20, as
// for most unprivileged users), a thread at idle priority could never be hurried, so
// confirmations run at normal priority there (idle_priority() is false) and the owner should
// wait for them at once.
//
// Errors: a scorer that throws ends the confirmation; Result::error holds its message.
// Thread safety: one owner thread calls every method; `on_done` runs on the confirmation's
// thread once the result is ready.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rollout/worker/rollback.h"

namespace updraft {

class BackgroundConfirmation {
 public:
  struct Result {
    double tau_new = 0, tau_old = 0;  // the scorer's estimates for the candidate and the previous drafter
    double seconds = 0;
    size_t samples = 0;
    std::string error;  // non-empty: the scorer threw, and there are no estimates
  };

  BackgroundConfirmation(DrafterScorer scorer, std::shared_ptr<const DraftModel> candidate,
                         std::shared_ptr<const DraftModel> previous, std::shared_ptr<const PolicyModel> policy,
                         std::vector<TttSample> samples, int64_t depth, std::function<void()> on_done);
  ~BackgroundConfirmation();  // waits for the thread
  BackgroundConfirmation(const BackgroundConfirmation&) = delete;
  BackgroundConfirmation& operator=(const BackgroundConfirmation&) = delete;

  // Whether this process may take idle priority and give it back (probed once).
  static bool idle_priority();

  bool done() const { return done_.load(std::memory_order_acquire); }
  double age_seconds() const;
  // Normal priority from now (logged when the system refuses).
  void hurry();
  // Blocks until done.
  Result wait();

 private:
  void run(const DrafterScorer& scorer, int64_t depth);

  std::shared_ptr<const DraftModel> candidate_, previous_;
  std::shared_ptr<const PolicyModel> policy_;
  std::vector<TttSample> samples_;
  std::function<void()> on_done_;
  std::chrono::steady_clock::time_point started_;
  std::atomic<bool> done_{false};
  bool idle_ = false;  // runs at idle priority (owner thread)
  std::latch start_{1};
  Result result_;
  std::thread thread_;
};

}  // namespace updraft
