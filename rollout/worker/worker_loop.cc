// The worker's engine thread (rollout/worker/worker.h): takes submissions and aborts, applies
// staged versions, steps the engines, and delivers completions, records and metrics.
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "kernels/core/error.h"
#include "rollout/capture/capture.h"
#include "rollout/worker/worker.h"

namespace updraft {

bool Worker::any_work() const {
  for (const ModeEngine& m : engines_)
    if (m.engine && m.engine->has_work())
      return true;
  return false;
}

bool Worker::any_running() const {
  for (const ModeEngine& m : engines_)
    if (m.engine && m.engine->running() > 0)
      return true;
  return false;
}

Worker::ModeEngine& Worker::engine_for(GenMode mode) {
  ModeEngine& m = engines_[static_cast<int>(mode)];
  if (m.engine)
    return m;
  const PolicyVersion p = versions_.policy();
  m.policy = p.model;
  m.policy_version = p.version;
  m.drafter = mode == GenMode::kServing ? versions_.drafter()
              : mode == GenMode::kReference ? versions_.reference()
                                            : DrafterVersion{};
  m.engine = std::make_unique<Engine>(*p.model, options_.engine, m.drafter.model.get());
  if (mode == GenMode::kServing && options_.speculate && options_.adaptive.enabled) {
    m.chooser = std::make_unique<AdaptiveDepth>(options_.engine.spec, options_.adaptive.model);
    m.engine->set_depth_chooser(m.chooser.get());
  }
  return m;
}

void Worker::loop() {
  if (options_.threads > 0)
    omp_set_num_threads(options_.threads);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stopping_ || wake_ || !inbox_.empty() || !aborts_.empty() || flush_requested_ ||
             pause_served_ < pause_requests_ || (!paused_ && any_work());
    });
    const uint64_t pause_ticket = pause_requests_;
    const PauseMode pause_mode = pause_mode_;
    const bool pause_now = pause_served_ < pause_requests_;
    wake_ = false;
    std::deque<Inbox> in;
    in.swap(inbox_);
    std::vector<uint64_t> aborts;
    aborts.swap(aborts_);
    const bool flush = std::exchange(flush_requested_, false);
    const bool stopping = stopping_;
    in_step_ = !paused_ || stopping;
    lock.unlock();

    if (stopping && !shutting_)
      begin_shutdown();
    apply_versions();
    if (stopping) {
      for (Inbox& x : in)
        finish_unadmitted(x, "shutting down");
      in.clear();
    }
    admit(in);
    for (uint64_t id : aborts)
      abort_in_engine(id);
    if (pause_now)
      pause_action(pause_mode);
    deliver_aborted();
    if (flush)
      do_flush();
    if (in_step_)
      for (const GenMode mode : {GenMode::kServing, GenMode::kReference, GenMode::kPlain})
        if (engines_[static_cast<int>(mode)].engine && engines_[static_cast<int>(mode)].engine->has_work())
          step(mode);

    lock.lock();
    in_step_ = false;
    if (pause_now)
      pause_served_ = pause_ticket;
    publish_state();
    state_cv_.notify_all();
    if (stopping_ && !any_work() && inbox_.empty()) {
      stopped_ = true;
      state_cv_.notify_all();
      return;
    }
  }
}

void Worker::begin_shutdown() {
  shutting_ = true;
  // Running requests finish; the ones not admitted yet are answered "shutting down".
  for (ModeEngine& m : engines_) {
    if (!m.engine)
      continue;
    m.engine->set_admission(false);
    for (uint64_t eid : m.engine->waiting_ids()) {
      m.tickets[eid].error = "shutting down";
      m.engine->abort(eid);
    }
  }
}

void Worker::finish_unadmitted(Inbox& x, const std::string& why) {
  Completion c;
  c.mode = x.mode;
  c.error = why;
  c.result.prompt = x.req.prompt;
  c.result.finish_reason = "abort";
  {
    std::lock_guard<std::mutex> lock(mu_);
    --load_.queued;
  }
  if (x.on_done)
    x.on_done(std::move(c));
}

void Worker::admit(std::deque<Inbox>& in) {
  for (Inbox& x : in) {
    ModeEngine& m = engine_for(x.mode);
    Ticket t;
    t.id = x.id;
    t.record = x.mode == GenMode::kServing && recorder_.take();
    x.req.capture = t.record;
    if (x.mode != GenMode::kServing)
      x.req.speculate = x.mode == GenMode::kReference;
    uint64_t eid = 0;
    try {
      eid = m.engine->submit(std::move(x.req));
    } catch (const Error& e) {
      finish_unadmitted(x, e.what());
      continue;
    }
    t.on_done = std::move(x.on_done);
    m.tickets[eid] = std::move(t);
    std::lock_guard<std::mutex> lock(mu_);
    engine_ids_[x.id] = {x.mode, eid};
    --load_.queued;
  }
}

void Worker::abort_in_engine(uint64_t id) {
  std::pair<GenMode, uint64_t> where;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = engine_ids_.find(id);
    if (it == engine_ids_.end())
      return;  // finished meanwhile
    where = it->second;
  }
  engines_[static_cast<int>(where.first)].engine->abort(where.second);
}

void Worker::apply_versions() {
  if (versions_.policy_staged()) {
    for (ModeEngine& m : engines_)
      if (m.engine)
        m.engine->set_admission(false);
    if (any_running())
      return;  // drain first; a staged drafter waits for the policy (it was loaded against it)
    versions_.install_policy();
    const PolicyVersion p = versions_.policy();
    for (int k = 0; k < 3; ++k) {
      ModeEngine& m = engines_[k];
      if (!m.engine)
        continue;
      m.policy = p.model;
      m.policy_version = p.version;
      m.drafter = k == static_cast<int>(GenMode::kServing)     ? versions_.drafter()
                  : k == static_cast<int>(GenMode::kReference) ? versions_.reference()
                                                               : DrafterVersion{};
      m.engine->set_policy(*p.model, m.drafter.model.get());
      m.engine->set_admission(!shutting_);
    }
    rollback_.policy_changed();
    close_window(false);
    window_policy_swapped_ = true;
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.policy_swaps;
  }
  if (options_.speculate && versions_.drafter_staged()) {
    const DrafterVersion before = versions_.drafter();
    versions_.install_drafter();
    if (before.model)
      pending_watch_ = true;
  }
  sync_drafter();
}

void Worker::sync_drafter() {
  ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  const DrafterVersion want = versions_.drafter();
  if (want.model == s.drafter.model || !options_.speculate)
    return;
  const bool in_flight = s.engine->running() > 0;
  if (drafter_retry_when_idle_ && in_flight)
    return;
  try {
    s.engine->set_drafter(want.model.get());
  } catch (const Error& e) {
    if (!drafter_retry_when_idle_)
      spdlog::warn("worker {}: drafter v{} not swapped in with requests in flight ({}); it waits until idle",
                   options_.id, want.version, e.what());
    drafter_retry_when_idle_ = true;
    return;
  }
  drafter_retry_when_idle_ = false;
  s.drafter = want;
  if (std::exchange(pending_watch_, false))
    rollback_.swapped();
  close_window(false);
  window_drafter_swapped_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.drafter_swaps;
  metrics_.mid_batch_swaps += in_flight ? 1 : 0;
}

void Worker::step(GenMode mode) {
  ModeEngine& m = engines_[static_cast<int>(mode)];
  Engine& e = *m.engine;
  const EngineStats before = e.stats();
  std::vector<GenResult> done;
  try {
    done = e.step();
  } catch (const std::exception& ex) {
    spdlog::error("worker {}: {} engine step failed: {}", options_.id, gen_mode_name(mode), ex.what());
    fail_all(mode, std::string("internal error: ") + ex.what());
    return;
  }
  if (mode == GenMode::kServing)
    account_step(before, e.stats());
  {
    std::lock_guard<std::mutex> lock(mu_);  // a completion's callback sees the load without it
    publish_state();
  }
  for (GenResult& g : done)
    deliver(mode, std::move(g));
  if (mode != GenMode::kServing)
    return;
  watch_rollback();
  if (window_.seconds >= options_.window_seconds || !e.has_work())
    close_window(!e.has_work());
}

void Worker::account_step(const EngineStats& before, const EngineStats& after) {
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  SpecStats d = after.spec;
  d.subtract(before.spec);
  const int64_t tokens = after.generated_tokens - before.generated_tokens;
  const double secs = after.step_seconds - before.step_seconds;
  rollback_.add_rounds(d);
  window_.seconds += secs;
  window_.tokens += tokens;
  window_.steps += after.steps - before.steps;
  window_.spec.merge(d);
  if (after.steps > before.steps && after.last_decoding > 0) {
    ++window_depth_steps_;
    window_depth_sum_ += static_cast<double>(after.last_depth);
    window_batch_sum_ += static_cast<double>(after.last_decoding);
  }
  std::lock_guard<std::mutex> lock(mu_);
  WorkerMetrics::Cell& cell = metrics_.by_version[{s.policy_version, s.drafter.version}];
  cell.spec.merge(d);
  cell.tokens += tokens;
  cell.seconds += secs;
}

void Worker::deliver(GenMode mode, GenResult&& g) {
  ModeEngine& m = engines_[static_cast<int>(mode)];
  const auto it = m.tickets.find(g.id);
  UPD_CHECK(it != m.tickets.end()) << "worker: a result for an unknown request " << g.id;
  Ticket t = std::move(it->second);
  m.tickets.erase(it);
  Completion c;
  c.mode = mode;
  c.policy_version = m.policy_version;
  c.drafter_version = m.drafter.version;
  c.error = t.error;
  if (mode == GenMode::kServing && t.record && g.aux.defined()) {
    c.record = true;
    recorder_.send(g, c.policy_version, c.drafter_version);
    rollback_.add_sample(sample_of(g, c.policy_version));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ids_.erase(t.id);
    metrics_.records = recorder_.stats();
    if (mode == GenMode::kServing)
      ++metrics_.by_version[{c.policy_version, c.drafter_version}].completions;
  }
  if (mode == GenMode::kServing)
    ++window_.completions;
  c.result = std::move(g);
  if (!t.on_done)
    return;
  try {
    t.on_done(std::move(c));
  } catch (const std::exception& ex) {
    spdlog::error("worker {}: a completion callback threw: {}", options_.id, ex.what());
  }
}

void Worker::fail_all(GenMode mode, const std::string& why) {
  ModeEngine& m = engines_[static_cast<int>(mode)];
  std::map<uint64_t, Ticket> tickets = std::move(m.tickets);
  m.tickets.clear();
  m.engine.reset();  // a fresh engine for what comes next
  m.chooser.reset();
  for (auto& [eid, t] : tickets) {
    Completion c;
    c.mode = mode;
    c.error = why;
    c.result.finish_reason = "abort";
    {
      std::lock_guard<std::mutex> lock(mu_);
      engine_ids_.erase(t.id);
    }
    if (t.on_done)
      t.on_done(std::move(c));
  }
  engine_for(mode);
}

void Worker::watch_rollback() {
  if (!rollback_.ready())
    return;
  ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  const DrafterVersion prev = versions_.previous();
  if (!prev.model || !s.drafter.model) {
    versions_.confirm();
    return;
  }
  const RollbackWatch::Verdict v = rollback_.decide(*s.drafter.model, *prev.model, *s.policy);
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.rollback_confirmations = rollback_.confirmations();
  }
  if (v != RollbackWatch::Verdict::kRollBack) {
    versions_.confirm();
    return;
  }
  spdlog::warn("worker {}: rolling drafter v{} back to v{}", options_.id, s.drafter.version, prev.version);
  versions_.roll_back();
  sync_drafter();
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.rollbacks;
}

void Worker::close_window(bool) {
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

void Worker::pause_action(PauseMode mode) {
  for (ModeEngine& m : engines_) {
    if (!m.engine)
      continue;
    if (mode == PauseMode::kRetract)
      m.engine->retract();
    if (mode != PauseMode::kAbort)
      continue;
    for (uint64_t eid : m.engine->running_ids())
      m.engine->abort(eid);
    for (uint64_t eid : m.engine->waiting_ids())
      m.engine->abort(eid);
  }
}

void Worker::deliver_aborted() {
  for (const GenMode mode : {GenMode::kServing, GenMode::kReference, GenMode::kPlain}) {
    if (!engines_[static_cast<int>(mode)].engine)
      continue;
    std::vector<GenResult> done = engines_[static_cast<int>(mode)].engine->flush_aborted();
    if (done.empty())
      continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      publish_state();
    }
    for (GenResult& g : done)
      deliver(mode, std::move(g));
  }
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
    for (const GenMode mode : {GenMode::kReference, GenMode::kPlain}) {
      ModeEngine& m = engines_[static_cast<int>(mode)];
      if (m.engine)
        freed += m.engine->cache().bytes();
      m = ModeEngine();
    }
    const KvCache& c = engines_[static_cast<int>(GenMode::kServing)].engine->cache();
    UPD_CHECK(c.free_blocks() == c.num_blocks())
        << "worker: idle engine holds " << c.num_blocks() - c.free_blocks() << " KV blocks";
    r = {true, "all " + std::to_string(c.num_blocks()) + " KV blocks of the serving engine are free; " +
                   std::to_string(freed >> 20) + " MiB of comparison-engine caches released"};
  }
  std::lock_guard<std::mutex> lock(mu_);
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
  load_.free_blocks = s.engine->cache().free_blocks();
  load_.total_blocks = s.engine->cache().num_blocks();
  serving_policy_version_ = s.policy_version;
  serving_drafter_version_ = s.drafter.version;
  const EngineStats& st = s.engine->stats();
  metrics_.steps = st.steps;
  metrics_.preemptions = st.preemptions;
  metrics_.aborted = st.aborted;
  metrics_.running = s.engine->running();
  metrics_.waiting = s.engine->waiting();
  metrics_.depth_steps = st.depth_steps;
  metrics_.records = recorder_.stats();
  metrics_.adaptive = s.chooser != nullptr;
  if (s.chooser)
    metrics_.adaptive_model = s.chooser->snapshot();
}

}  // namespace updraft
