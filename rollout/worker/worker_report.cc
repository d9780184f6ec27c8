// The worker's accounting on its engine thread (rollout/worker/worker.h): per-step metrics by
// version, dashboard windows, the published load and metrics, and flush_cache.
#include <spdlog/spdlog.h>

#include "kernels/core/error.h"
#include "rollout/worker/worker.h"

namespace updraft {

void Worker::account_step(const EngineStats& before, const EngineStats& after) {
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  SpecStats d = after.spec, probes = after.probe_spec, drafter = after.drafter_spec;
  d.subtract(before.spec);
  probes.subtract(before.probe_spec);
  drafter.subtract(before.drafter_spec);
  const int64_t tokens = after.generated_tokens - before.generated_tokens;
  const double secs = after.step_seconds - before.step_seconds;
  // Comparable across drafters: probes, else the drafter's own part of the rounds (suffix drafts'
  // acceptance would dilute a drafter's drop).
  rollback_.add_rounds(options_.probe_every > 0 ? probes : drafter);
  window_.seconds += secs;
  window_.tokens += tokens;
  window_.steps += after.steps - before.steps;
  window_.spec.merge(d);
  window_.probe_spec.merge(probes);
  window_.drafter_spec.merge(drafter);
  if (after.steps > before.steps && after.last_decoding > 0) {
    ++window_depth_steps_;
    window_depth_sum_ += static_cast<double>(after.last_depth);
    window_batch_sum_ += static_cast<double>(after.last_decoding);
  }
  std::lock_guard<std::mutex> lock(mu_);
  WorkerMetrics::Cell& cell = metrics_.by_version[{s.policy_version, s.drafter.version}];
  cell.spec.merge(d);
  cell.probe_spec.merge(probes);
  cell.tokens += tokens;
  cell.seconds += secs;
}

void Worker::close_window() {
  if (window_.steps == 0)
    return;
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  window_.t = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  window_.policy_version = s.policy_version;
  window_.drafter_version = s.drafter.version;
  window_.mean_depth = window_depth_steps_ > 0 ? window_depth_sum_ / static_cast<double>(window_depth_steps_) : 0.0;
  window_.mean_batch = window_depth_steps_ > 0 ? window_batch_sum_ / static_cast<double>(window_depth_steps_) : 0.0;
  window_.policy_swapped = std::exchange(window_policy_swapped_, false);
  window_.drafter_swapped = std::exchange(window_drafter_swapped_, false);
  if (options_.on_window) {
    try {
      options_.on_window(window_);
    } catch (const std::exception& ex) {
      spdlog::error("worker {}: the window callback threw: {}", options_.id, ex.what());
    }
  }
  window_ = WindowReport();
  window_depth_steps_ = 0;
  window_depth_sum_ = window_batch_sum_ = 0;
}

void Worker::do_flush() {
  FlushResult r;
  if (any_work()) {
    int64_t running = 0, waiting = 0;
    for (const ModeEngine& m : engines_)
      if (m.engine) {
        running += m.engine->running();
        waiting += m.engine->waiting();
      }
    r = {false, "cache not flushed: " + std::to_string(running) + " requests running and " + std::to_string(waiting) +
                    " waiting (abort them or wait)"};
  } else {
    int64_t freed = 0;
    for (const GenMode mode : {GenMode::kReference, GenMode::kPlain, GenMode::kFull}) {
      ModeEngine& m = engines_[static_cast<int>(mode)];
      if (m.engine)
        freed += m.engine->cache().bytes();
      m = ModeEngine();
    }
    Engine& serving = *engines_[static_cast<int>(GenMode::kServing)].engine;
    serving.drop_prefix_donors();
    const KvCache& c = serving.cache();
    UPD_CHECK(c.free_blocks() == c.num_blocks())
        << "worker: idle engine holds " << c.num_blocks() - c.free_blocks() << " KV blocks";
    r = {true, "all " + std::to_string(c.num_blocks()) + " KV blocks of the serving engine are free; " +
                   std::to_string(freed >> 20) + " MiB of comparison-engine caches released"};
  }
  std::lock_guard<std::mutex> lock(mu_);
  publish_state();  // before the caller hears of it: /get_load right after sees the flushed cache
  flush_result_ = r;
  flush_done_ = true;
  state_cv_.notify_all();
}

void Worker::publish_state() {  // mu_ held
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  int64_t running = 0, waiting = 0;
  for (const ModeEngine& m : engines_)
    if (m.engine) {
      running += m.engine->running();
      waiting += m.engine->waiting();
    }
  load_.running = running;
  load_.waiting = waiting;
  load_.free_blocks = s.engine->cache().free_blocks() + s.engine->prefix_donor_blocks();  // donors' go on demand
  load_.total_blocks = s.engine->cache().num_blocks();
  load_.block_size = s.engine->cache().block_size();
  serving_policy_version_ = s.policy_version;
  serving_drafter_version_ = s.drafter.version;
  rollback_undecided_ = rollback_.ready() || confirmation_ != nullptr;
  const EngineStats& st = s.engine->stats();
  metrics_.steps = st.steps;
  metrics_.canary_steps = st.canary_steps;
  metrics_.preemptions = st.preemptions;
  metrics_.prefill_tokens = st.prompt_tokens;
  metrics_.cached_prompt_tokens = st.reused_tokens;
  metrics_.aborted = st.aborted;
  metrics_.running = s.engine->running();
  metrics_.waiting = s.engine->waiting();
  metrics_.depth_steps = st.depth_steps;
  metrics_.records = recorder_.stats();
  metrics_.adaptive = s.chooser != nullptr;
  if (s.chooser)
    metrics_.adaptive_model = s.chooser->snapshot();
  const SuffixGate* gate = s.engine->suffix_gate();
  metrics_.suffix_gate = gate != nullptr;
  if (gate != nullptr)
    metrics_.suffix_gate_model = gate->snapshot();
  metrics_.draws = s.engine->draws().snapshot();
}

}  // namespace updraft
