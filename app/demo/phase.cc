#include "app/demo/phase.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "kernels/core/cpu_team.h"
#include "kernels/core/error.h"
#include "rollout/spec/adaptive.h"

namespace updraft::demo {
using Clock = std::chrono::steady_clock;

double process_cpu_seconds() {
  timespec ts{};
  UPD_REQUIRE(::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) << "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed";
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Phase run_phase(std::vector<std::unique_ptr<Worker>>& workers, const std::vector<GenRequest>& reqs, GenMode mode,
                size_t group) {
  const size_t W = workers.size();
  auto worker_of = [&](size_t i) { return (i / group) % W; };
  Phase ph;
  ph.batches.resize(W);
  std::vector<std::vector<GenRequest>> parts(W);
  for (size_t i = 0; i < reqs.size(); ++i)
    parts[worker_of(i)].push_back(reqs[i]);
  std::vector<std::exception_ptr> errors(W);
  release_cpu_team();  // this thread only waits now: its CPU team must not slow the workers'
  auto stalls = [&](int64_t& steps, double& seconds) {
    steps = 0;
    seconds = 0;
    for (const auto& w : workers) {
      const WorkerMetrics m = w->metrics();
      steps += m.adaptive_model.stall_steps;
      seconds += m.adaptive_model.stall_seconds;
    }
  };
  int64_t stall_steps0 = 0;
  double stall_seconds0 = 0;
  stalls(stall_steps0, stall_seconds0);
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < W; ++w)
    threads.emplace_back([&, w] {
      try {
        if (!parts[w].empty())
          ph.batches[w] = workers[w]->generate(parts[w], mode);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  ph.seconds = since(t0);
  ph.cpu_seconds = process_cpu_seconds() - cpu0;
  stalls(ph.stall_steps, ph.stall_seconds);
  // A worker that replaced its chooser during the phase (an engine rebuilt) restarts its counts.
  ph.stall_steps = std::max<int64_t>(0, ph.stall_steps - stall_steps0);
  ph.stall_seconds = std::max(0.0, ph.stall_seconds - stall_seconds0);
  for (auto& e : errors)
    if (e)
      std::rethrow_exception(e);
  ph.ordered.resize(reqs.size());
  std::vector<size_t> next(W, 0);
  for (size_t i = 0; i < reqs.size(); ++i)
    ph.ordered[i] = &ph.batches[worker_of(i)].completions[next[worker_of(i)]++];
  for (const BatchReport& b : ph.batches) {
    ph.spec.merge(b.spec);
    ph.probe_spec.merge(b.probe_spec);
    ph.tokens += b.generated_tokens;
    ph.drafter_version = std::max(ph.drafter_version, b.drafter_version);
  }
  return ph;
}

// Seconds the workers spent turning completions into records (inside generation), the most
// of any worker: they ran in parallel.
double record_seconds(const std::vector<std::unique_ptr<Worker>>& workers) {
  double most = 0;
  for (const auto& w : workers)
    most = std::max(most, w->metrics().records.seconds);
  return most;
}

Measured measure(const PolicyModel& policy, const DraftModel* drafter, const std::vector<GenRequest>& reqs,
                 const EngineOptions& eo, bool adaptive) {
  Engine e(policy, eo, drafter);
  AdaptiveDepth chooser(eo.spec);
  if (adaptive)
    e.set_depth_chooser(&chooser);
  for (GenRequest r : reqs) {
    r.speculate = drafter != nullptr;
    e.submit(std::move(r));
  }
  const auto t0 = Clock::now();
  Measured m;
  for (const GenResult& r : e.run())
    m.tokens += static_cast<int64_t>(r.tokens.size());
  m.seconds = since(t0);
  m.spec = e.stats().spec;
  return m;
}

}  // namespace updraft::demo
