#include "app/demo/phase.h"

#include <time.h>

#include <algorithm>
#include <atomic>
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

namespace {

// A pull's report joined to what the worker ran before it (the pulls of one worker run in turn).
void add_pull(BatchReport& into, BatchReport&& r) {
  const auto n0 = static_cast<double>(into.completions.size()), n1 = static_cast<double>(r.completions.size());
  into.mean_depth = n0 + n1 > 0 ? (into.mean_depth * n0 + r.mean_depth * n1) / (n0 + n1) : 0.0;
  into.mode = r.mode;
  into.policy_version = r.policy_version;
  into.drafter_version = r.drafter_version;  // serving when its last completion finished
  into.spec.merge(r.spec);
  into.probe_spec.merge(r.probe_spec);
  into.generated_tokens += r.generated_tokens;
  into.generate_seconds += r.generate_seconds;
  into.speculated += r.speculated;
  for (Completion& c : r.completions)
    into.completions.push_back(std::move(c));
}

// The pulls of a phase: request indices, whole groups; with pull 0, worker w's fixed share is pull w.
std::vector<std::vector<size_t>> make_pulls(size_t n, size_t W, size_t group, size_t pull) {
  std::vector<std::vector<size_t>> pulls(pull == 0 ? W : (n + pull - 1) / pull);
  for (size_t i = 0; i < n; ++i)
    pulls[pull == 0 ? (i / group) % W : i / pull].push_back(i);
  return pulls;
}

}  // namespace

Phase run_phase(std::vector<std::unique_ptr<Worker>>& workers, const std::vector<GenRequest>& reqs, GenMode mode,
                size_t group, size_t pull) {
  UPD_CHECK(group >= 1 && pull % group == 0)
      << "run_phase: a pull of " << pull << " requests splits groups of " << group;
  const size_t W = workers.size();
  const std::vector<std::vector<size_t>> pulls = make_pulls(reqs.size(), W, group, pull);
  Phase ph;
  ph.batches.resize(W);
  std::vector<std::pair<size_t, size_t>> where(reqs.size());  // request i: (worker, completion)
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
  std::atomic<size_t> next{0};
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < W; ++w)
    threads.emplace_back([&, w] {
      try {
        // Fixed shares: worker w's own pull only; else the next pull not yet taken, until none is left.
        auto take = [&](bool first) { return pull == 0 ? (first ? w : pulls.size()) : next++; };
        for (size_t p = take(true); p < pulls.size(); p = take(false)) {
          if (pulls[p].empty())
            continue;
          std::vector<GenRequest> part;
          for (size_t i : pulls[p]) {
            where[i] = {w, ph.batches[w].completions.size() + part.size()};
            part.push_back(reqs[i]);
          }
          add_pull(ph.batches[w], workers[w]->generate(part, mode));
        }
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
  for (size_t i = 0; i < reqs.size(); ++i)
    ph.ordered[i] = &ph.batches[where[i].first].completions[where[i].second];
  for (const BatchReport& b : ph.batches) {
    ph.spec.merge(b.spec);
    ph.probe_spec.merge(b.probe_spec);
    ph.tokens += b.generated_tokens;
    ph.drafter_version = std::max(ph.drafter_version, b.drafter_version);
  }
  for (BatchReport& b : ph.batches)  // a worker that took no pull reports the phase's policy
    if (b.completions.empty() && !reqs.empty())
      b.policy_version = ph.batches[where[0].first].policy_version;
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
