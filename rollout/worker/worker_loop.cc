// The worker's engine thread (rollout/worker/worker.h): takes submissions and aborts, applies
// staged versions, steps the engines, and delivers completions, records and metrics.
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "kernels/core/cpu_team.h"
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

DrafterVersion Worker::drafter_of(GenMode mode) const {
  switch (mode) {
    case GenMode::kServing:
    case GenMode::kFull:
      return versions_.drafter();
    case GenMode::kReference:
      return versions_.reference();
    case GenMode::kPlain:
      break;
  }
  return {};
}

Worker::ModeEngine& Worker::engine_for(GenMode mode) {
  ModeEngine& m = engines_[static_cast<int>(mode)];
  if (m.engine)
    return m;
  const PolicyVersion p = versions_.policy();
  m.policy = p.model;
  m.policy_version = p.version;
  m.drafter = drafter_of(mode);
  // Suffix drafts serve; the reference, plain and full-settings runs measure the drafters and
  // plain decoding alone.
  EngineOptions eo = options_.engine;
  if (mode != GenMode::kServing || !options_.speculate)
    eo.suffix.mode = SuffixMode::kOff;
  m.engine = std::make_unique<Engine>(*p.model, eo, m.drafter.model.get());
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
  const auto ready = [&] {
    return stopping_ || wake_ || !inbox_.empty() || !aborts_.empty() || flush_requested_ ||
           pause_served_ < pause_requests_ || (!paused_ && any_work());
  };
  for (;;) {
    if (!ready()) {  // going idle: the CPU team goes back (kernels/core/cpu_team.h)
      lock.unlock();
      release_cpu_team();
      lock.lock();
    }
    if (confirmation_) {  // woken when it is done, or at its deadline (collect_confirmation)
      const double left = std::max(0.0, options_.rollback_wait_seconds - confirmation_->age_seconds());
      cv_.wait_for(lock, std::chrono::duration<double>(left), ready);
    } else {
      cv_.wait(lock, ready);
    }
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
    collect_confirmation();
    watch_rollback();  // a watch that closed while a confirmation ran
    apply_versions();
    if (stopping) {
      for (Inbox& x : in)
        finish_unadmitted(x, CompletionStatus::kShuttingDown, "shutting down");
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
      for (const GenMode mode : {GenMode::kServing, GenMode::kReference, GenMode::kPlain, GenMode::kFull})
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
      m.tickets[eid].shutting_down = true;
      m.engine->abort(eid);
    }
  }
}

void Worker::finish_unadmitted(Inbox& x, CompletionStatus status, const std::string& why) {
  Completion c;
  c.mode = x.opts.mode;
  c.status = status;
  c.error = why;
  c.result.prompt = x.req.prompt;
  c.result.finish_reason = "abort";
  {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ids_.erase(x.id);
    --load_.queued;
  }
  if (x.on_done)
    x.on_done(std::move(c));
}

void Worker::admit(std::deque<Inbox>& in) {
  for (Inbox& x : in) {
    const GenMode mode = x.opts.mode;
    const bool serving = mode == GenMode::kServing && !x.opts.internal;
    ModeEngine& m = engine_for(mode);
    Ticket t;
    t.id = x.id;
    t.internal = x.opts.internal;
    t.record = serving && recorder_.take();
    t.probe = serving && options_.probe_every > 0 &&
              serving_requests_++ % static_cast<uint64_t>(options_.probe_every) == 0;
    x.req.capture = t.record;
    x.req.probe = t.probe;
    if (mode != GenMode::kServing)
      x.req.speculate = mode == GenMode::kReference || mode == GenMode::kFull;
    uint64_t eid = 0;
    try {
      eid = m.engine->submit(std::move(x.req));
    } catch (const Error& e) {
      finish_unadmitted(x, CompletionStatus::kFailed, e.what());
      continue;
    }
    t.on_done = std::move(x.on_done);
    m.tickets[eid] = std::move(t);
    std::lock_guard<std::mutex> lock(mu_);
    engine_ids_[x.id] = {mode, eid};
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
  if (where.second == 0)
    return;  // cannot happen: a request is admitted before the aborts taken with it are applied
  engines_[static_cast<int>(where.first)].engine->abort(where.second);
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
    close_window();
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
  c.probe = t.probe;
  if (t.shutting_down) {
    c.status = CompletionStatus::kShuttingDown;
    c.error = "shutting down";
  } else if (g.finish_reason == "abort") {
    c.status = CompletionStatus::kAborted;
  }
  if (mode == GenMode::kServing && t.record && g.aux.defined() && !g.tokens.empty()) {
    c.record = true;
    TttSample sample = sample_of(g, c.policy_version);
    recorder_.send(sample, g.rounds, c.drafter_version);
    if (rollback_.confirms())
      rollback_.add_sample(std::move(sample));
  }
  const bool counted = mode == GenMode::kServing && !t.internal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ids_.erase(t.id);
    metrics_.records = recorder_.stats();
    if (counted)
      ++metrics_.by_version[{c.policy_version, c.drafter_version}].completions;
  }
  if (counted)
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
    c.status = CompletionStatus::kFailed;
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
  for (const GenMode mode : {GenMode::kServing, GenMode::kReference, GenMode::kPlain, GenMode::kFull}) {
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



}  // namespace updraft
