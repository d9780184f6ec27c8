#include "rollout/worker/worker.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "kernels/core/error.h"

namespace updraft {

const char* gen_mode_name(GenMode m) {
  switch (m) {
    case GenMode::kServing:
      return "serving";
    case GenMode::kReference:
      return "reference";
    case GenMode::kPlain:
      return "plain";
    case GenMode::kFull:
      return "full";
  }
  return "?";
}

namespace {

RecordOptions record_options(const WorkerOptions& o) {
  RecordOptions r;
  r.worker = o.id;
  r.rate = o.record_rate;
  r.max_tokens = o.record_max_tokens;
  return r;
}

RollbackOptions rollback_options(const WorkerOptions& o) {
  RollbackOptions r;
  r.margin = o.rollback_margin;
  r.rounds = o.rollback_rounds;
  r.depth = std::max<int64_t>(1, o.engine.spec.steps);
  return r;
}

}  // namespace

Worker::Worker(WorkerOptions options, std::shared_ptr<const PolicyModel> policy, uint64_t policy_version,
               std::shared_ptr<const DraftModel> drafter, uint64_t drafter_version,
               std::shared_ptr<messaging::RecordSender> sender)
    : options_(std::move(options)),
      config_(policy ? policy->config() : PolicyConfig()),
      versions_(options_.id, {policy, policy_version},
                options_.speculate ? DrafterVersion{std::move(drafter), drafter_version} : DrafterVersion{}),
      recorder_(record_options(options_), std::move(sender)),
      rollback_(rollback_options(options_), options_.scorer),
      started_(std::chrono::steady_clock::now()) {
  if (options_.speculate)
    options_.engine.spec.validate();
  UPD_REQUIRE(options_.window_seconds > 0) << "worker: window_seconds must be positive";
  block_size_ = options_.engine.block_size;
  kv_blocks_ = KvCache::blocks_for_bytes(policy->kv_shape(), block_size_, options_.engine.kv_cache_bytes);
  engine_for(GenMode::kServing);  // built here: its caches are allocated before the first request
  {
    std::lock_guard<std::mutex> lock(mu_);
    publish_state();
  }
  thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() { stop(); }

void Worker::check(const GenRequest& req, GenMode mode) const {
  Engine::validate(req, config_, options_.engine, kv_blocks_);
  UPD_REQUIRE(mode != GenMode::kReference || versions_.reference().model != nullptr)
      << "worker: no reference drafter set";
}

void Submission::complete(size_t i, Completion c) {
  std::lock_guard<std::mutex> lock(mu_);
  out_[i] = std::move(c);
  if (--left_ == 0)
    cv_.notify_all();
}

void Submission::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return left_ == 0; });
}

bool Submission::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return left_ == 0; });
}

std::vector<Completion> Submission::take() {
  wait();
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(out_);
}

uint64_t Worker::enqueue(GenRequest req, CompletionCallback on_done, const SubmitOptions& opts) {
  UPD_REQUIRE(!stopping_) << "the worker is shutting down";
  const uint64_t id = next_id_++;
  inbox_.push_back({id, opts, std::move(req), std::move(on_done)});
  engine_ids_[id] = {opts.mode, 0};  // abort() finds it from now on
  ++load_.queued;
  cv_.notify_all();
  return id;
}

uint64_t Worker::submit(GenRequest req, CompletionCallback on_done, SubmitOptions opts) {
  check(req, opts.mode);
  std::lock_guard<std::mutex> lock(mu_);
  return enqueue(std::move(req), std::move(on_done), opts);
}

std::shared_ptr<Submission> Worker::submit_all(std::vector<GenRequest> reqs, SubmitOptions opts) {
  for (const GenRequest& r : reqs)
    check(r, opts.mode);
  auto sub = std::make_shared<Submission>(reqs.size());
  std::lock_guard<std::mutex> lock(mu_);
  UPD_REQUIRE(!stopping_) << "the worker is shutting down";
  for (size_t i = 0; i < reqs.size(); ++i)
    sub->ids_.push_back(enqueue(std::move(reqs[i]), [sub, i](Completion c) { sub->complete(i, std::move(c)); }, opts));
  return sub;
}

bool Worker::abort(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!engine_ids_.count(id))
    return false;  // unknown, or finished
  aborts_.push_back(id);  // the engine thread answers it (callbacks run there)
  cv_.notify_all();
  return true;
}

BatchReport Worker::generate(const std::vector<GenRequest>& requests, GenMode mode) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::shared_ptr<Submission> sub = submit_all(requests, {mode, false});
  BatchReport rep;
  rep.mode = mode;
  rep.completions = sub->take();
  rep.generate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t depth_sum = 0, decode_steps = 0;
  for (const Completion& c : rep.completions) {
    if (!c.error.empty())
      throw Error("worker: request failed: " + c.error);
    rep.generated_tokens += static_cast<int64_t>(c.result.tokens.size());
    rep.spec.merge(c.result.spec);
    if (c.probe)
      rep.probe_spec.merge(c.result.spec);
    rep.speculated += c.result.spec.rounds > 0 ? 1 : 0;
    for (const SpecRound& r : c.result.rounds)
      depth_sum += r.eagle_depth;  // the drafter's depth (suffix drafts reach deeper)
    decode_steps += c.result.spec.rounds + c.result.plain_steps;
    rep.policy_version = c.policy_version;
    rep.drafter_version = c.drafter_version;
  }
  rep.mean_depth = decode_steps > 0 ? static_cast<double>(depth_sum) / static_cast<double>(decode_steps) : 0.0;
  return rep;
}

bool Worker::offer_policy(const std::string& dir, std::string* why, uint64_t version, WeightVersion* accepted) {
  const bool ok = versions_.offer_policy(dir, why, version, accepted);
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = true;
  cv_.notify_all();
  return ok;
}

bool Worker::offer_drafter(const std::string& dir, std::string* why, uint64_t version, WeightVersion* accepted) {
  if (!options_.speculate) {
    if (why)
      *why = "this worker does not speculate (speculation is off in its options)";
    return false;
  }
  const bool ok = versions_.offer_drafter(dir, why, version, accepted);
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = true;
  cv_.notify_all();
  return ok;
}

void Worker::set_reference_drafter(std::shared_ptr<const DraftModel> drafter, uint64_t version) {
  versions_.set_reference({std::move(drafter), version});
}

bool Worker::wait_serving(bool drafter, uint64_t version, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return state_cv_.wait_for(lock, timeout, [&] {
    return stopping_ || (drafter ? serving_drafter_version_ : serving_policy_version_) >= version;
  }) && !stopping_;
}

bool Worker::wait_rollback_verdict(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return state_cv_.wait_for(lock, timeout, [&] { return stopping_ || !rollback_undecided_; }) && !stopping_;
}

void Worker::pause(PauseMode mode) {
  std::unique_lock<std::mutex> lock(mu_);
  paused_ = true;
  pause_mode_ = mode;
  const uint64_t ticket = ++pause_requests_;
  cv_.notify_all();
  state_cv_.wait(lock, [&] { return stopped_ || (!in_step_ && pause_served_ >= ticket); });
}

void Worker::resume() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = false;
  cv_.notify_all();
}

Worker::FlushResult Worker::flush_cache() {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_)
    return {false, "the worker is shutting down"};
  flush_requested_ = true;
  flush_done_ = false;
  cv_.notify_all();
  state_cv_.wait(lock, [&] { return flush_done_ || stopped_; });
  return flush_done_ ? flush_result_ : FlushResult{false, "the worker stopped"};
}

void Worker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    state_cv_.notify_all();
  }
  if (thread_.joinable())
    thread_.join();
  if (confirmation_) {  // the engine thread has gone: no verdict to apply
    confirmation_->hurry();
    confirmation_.reset();
  }
}

Worker::Load Worker::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return load_;
}

uint64_t Worker::policy_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_policy_version_;
}

uint64_t Worker::drafter_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_drafter_version_;
}

WorkerMetrics Worker::metrics() const {
  WorkerMetrics m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    m = metrics_;
  }
  m.rejected_policy = versions_.rejected_policy();
  m.rejected_drafter = versions_.rejected_drafter();
  return m;
}

}  // namespace updraft
