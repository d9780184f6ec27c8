// The demo's generation phases (app/demo/demo.h): the same requests through the workers in one
// mode (serving, frozen reference, plain, full settings), and single-engine measurements on the
// final policy; plus the process CPU clock the demo uses to report the trainer's compute share.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "rollout/engine/engine.h"
#include "rollout/worker/worker.h"

namespace updraft::demo {

// One generation phase: the requests split over the workers, run in parallel.
struct Phase {
  std::vector<BatchReport> batches;        // per worker
  std::vector<const Completion*> ordered;  // completion of request i
  SpecStats spec, probe_spec;              // every round; the probe requests' (full settings)
  int64_t tokens = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // the process's CPU time over the phase (all threads)
  uint64_t drafter_version = 0;
  // The serving engines' depth choosers over the phase, summed over the workers: steps over twice
  // their cell's settled cost and the seconds they took beyond it (rollout/spec/adaptive.h).
  int64_t stall_steps = 0;
  double stall_seconds = 0;
};

// The requests go to the workers `pull` consecutive ones at a time (whole groups: a group's
// siblings to one worker, as a prefix-aware router places them, so that they can draft for one
// another), each worker taking the next pull as soon as it has finished its last, as a
// least-loaded router sends work. A fixed split (request i to worker (i / group) % W, each share
// in one call) left the phase's wall time to the slowest worker: 8-13% over the workers' mean in
// the default demo, and more for speculative phases, whose groups' times vary with acceptance.
// pull 0: that fixed split (a worker that decodes its whole share at once).
Phase run_phase(std::vector<std::unique_ptr<Worker>>& workers, const std::vector<GenRequest>& reqs, GenMode mode,
                size_t group, size_t pull);

// Seconds the workers spent turning completions into records (inside generation), the most of
// any worker: they ran in parallel.
double record_seconds(const std::vector<std::unique_ptr<Worker>>& workers);

struct Measured {
  SpecStats spec;
  int64_t tokens = 0;
  double seconds = 0;
  double tokens_per_s() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
};

// One engine run over reqs (the drafter at the full settings, or with adaptive depth).
Measured measure(const PolicyModel& policy, const DraftModel* drafter, const std::vector<GenRequest>& reqs,
                 const EngineOptions& eo, bool adaptive = false);

// CPU seconds this process has used (every thread), from CLOCK_PROCESS_CPUTIME_ID.
double process_cpu_seconds();

// Wall seconds since t0 on the steady clock.
inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace updraft::demo
