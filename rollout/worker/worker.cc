#include "rollout/worker/worker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kernels/core/error.h"
#include "kernels/io/weight_version.h"
#include "trainer/draft_train.h"
#include "trainer/online/record_convert.h"

namespace updraft {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* gen_mode_name(GenMode m) {
  switch (m) {
    case GenMode::kServing:
      return "serving";
    case GenMode::kReference:
      return "reference";
    case GenMode::kPlain:
      return "plain";
  }
  return "?";
}

Worker::Worker(WorkerOptions options, std::shared_ptr<const PolicyModel> policy, uint64_t policy_version,
               std::shared_ptr<const DraftModel> drafter, uint64_t drafter_version,
               std::shared_ptr<messaging::RecordSender> sender)
    : options_(std::move(options)), sender_(std::move(sender)), policy_(std::move(policy)),
      policy_version_(policy_version),
      adaptive_(options_.engine.spec.steps, options_.adaptive.shorter_chains && options_.engine.spec.chain(),
                options_.adaptive.ema) {
  UPD_REQUIRE(policy_ != nullptr) << "Worker: a policy is required";
  serving_ = {std::move(drafter), drafter_version};
  if (serving_.model)
    policy_->check_aux_layers(serving_.model->aux_layers());
  options_.engine.spec.validate();
  UPD_REQUIRE(options_.record_rate >= 0 && options_.record_rate <= 1 &&
              (options_.record_max_tokens == 0 || options_.record_max_tokens >= 2))
      << "Worker: record_rate must be in [0, 1] and record_max_tokens 0 or at least 2";
  if (options_.adaptive.enabled) {
    // The first engine of a process pays first-touch costs for its caches (about 0.2 s for the
    // default 256 MiB; later ones reuse the memory): paid here, not by the first measured run.
    Engine warm(*policy_, options_.engine, serving_.model.get());
  }
  UPD_REQUIRE(options_.adaptive.fixed_depth <= full_depth() &&
              (options_.adaptive.fixed_depth == full_depth() || options_.adaptive.fixed_depth < 1 ||
               options_.engine.spec.chain()))
      << "Worker: adaptive fixed_depth " << options_.adaptive.fixed_depth << " is not plain, a chain depth up to "
      << full_depth() << ", or the full settings";
  metrics_.adaptive_depth_batches.assign(static_cast<size_t>(full_depth()) + 1, 0);
}

bool Worker::offer_policy(const std::string& dir, std::string* why) {
  try {
    const WeightVersion v = verify_version(dir, "policy");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (v.version <= std::max(policy_version_, staged_policy_version_))
        throw Error("version " + std::to_string(v.version) + " is not newer than the serving or staged one");
    }
    auto p = std::make_shared<PolicyModel>(PolicyModel::load(dir));
    std::lock_guard<std::mutex> lock(mu_);
    check_successor(p->config(), policy_->config());
    if (serving_.model)
      p->check_aux_layers(serving_.model->aux_layers());
    staged_policy_ = std::move(p);
    staged_policy_version_ = v.version;
    spdlog::debug("worker {}: staged policy v{}", options_.id, v.version);
    return true;
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.rejected_policy;
    spdlog::warn("worker {}: rejected policy {}: {}", options_.id, dir, e.what());
    if (why)
      *why = e.what();
    return false;
  }
}

bool Worker::offer_drafter(const std::string& dir, std::string* why) {
  try {
    const WeightVersion v = verify_version(dir, "drafter");
    std::shared_ptr<const PolicyModel> policy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (v.version <= std::max(serving_.version, staged_drafter_.version))
        throw Error("version " + std::to_string(v.version) + " is not newer than the serving or staged one");
      if (banned_drafters_.count(v.version))
        throw Error("version " + std::to_string(v.version) + " was rolled back");
      policy = staged_policy_ ? staged_policy_ : policy_;
    }
    auto d = std::make_shared<const DraftModel>(DraftModel::load(dir, policy->draft_target()));
    policy->check_aux_layers(d->aux_layers());
    std::lock_guard<std::mutex> lock(mu_);
    staged_drafter_ = {std::move(d), v.version};
    spdlog::debug("worker {}: staged drafter v{}", options_.id, v.version);
    return true;
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.rejected_drafter;
    spdlog::warn("worker {}: rejected drafter {}: {}", options_.id, dir, e.what());
    if (why)
      *why = e.what();
    return false;
  }
}

void Worker::set_reference_drafter(std::shared_ptr<const DraftModel> drafter, uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_->check_aux_layers(drafter->aux_layers());
  reference_ = {std::move(drafter), version};
}

void Worker::apply_staged() {
  std::lock_guard<std::mutex> lock(mu_);
  if (staged_policy_) {
    policy_ = std::move(staged_policy_);
    policy_version_ = staged_policy_version_;
    const DraftTarget t = policy_->draft_target();
    // Drafters read the policy's embedding table: every one kept follows the new policy (a
    // staged drafter was loaded against the old one's table).
    for (Drafter* d : {&serving_, &reference_, &previous_, &staged_drafter_})
      if (d->model)
        d->model = std::make_shared<const DraftModel>(d->model->rebind(t));
    ++metrics_.policy_swaps;
  }
  if (staged_drafter_.model) {
    install_drafter(std::move(staged_drafter_));
    staged_drafter_ = {};
  }
}

void Worker::install_drafter(Drafter d) {
  if (serving_.model)
    previous_ = serving_;
  serving_ = std::move(d);
  watch_new_ = SpecStats();
  watching_ = previous_.model != nullptr;
  ++metrics_.drafter_swaps;
  spdlog::info("worker {}: serving drafter v{} (policy v{})", options_.id, serving_.version, policy_version_);
}

bool Worker::swap_in_staged(Engine& engine, Drafter& drafter) {
  Drafter staged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!staged_drafter_.model || staged_policy_)
      return false;  // nothing staged, or a staged policy goes first (the drafter was loaded against it)
    staged = staged_drafter_;
  }
  try {
    engine.swap_drafter(staged.model.get());
  } catch (const Error& e) {  // e.g. its cache cannot hold the sequences in flight: next batch
    spdlog::warn("worker {}: drafter v{} not swapped in mid-batch ({}); it waits for the next batch", options_.id,
                 staged.version, e.what());
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (staged_drafter_.version == staged.version)
    staged_drafter_ = {};
  install_drafter(staged);
  ++metrics_.mid_batch_swaps;
  drafter = std::move(staged);
  return true;
}

void Worker::watch_acceptance(const BatchReport& rep) {
  Drafter candidate, previous;
  SpecStats live_new, live_old;
  std::shared_ptr<const PolicyModel> policy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!watching_) {
      last_of_previous_ = rep.spec;  // the serving drafter's most recent batch: the bar for its successor
      return;
    }
    watch_new_.merge(rep.spec);
    if (watch_new_.rounds < options_.rollback_rounds)
      return;
    watching_ = false;
    candidate = serving_;
    previous = previous_;
    live_new = watch_new_;
    live_old = last_of_previous_;
    policy = policy_;
  }
  // The verdict. Live first: the new drafter's τ over its first rounds against the previous one's
  // on its last batch, which costs nothing. Only when that falls below the bar is it confirmed on
  // the same requests, since a change of prompts (a new curriculum stage, harder requests) moves
  // live τ too: when this batch captured its completions (aux states + tokens), both drafters'
  // greedy chain acceptance is estimated teacher-forced on them, tau-hat = 1 + sum_k prod_{j<=k}
  // a_j over the engine's chain length, and that decides. At most 32 completions are scored:
  // enough to tell a damaged drafter; it costs about as much as decoding them, which is why it
  // runs only on an alarm. (serving_ and previous_ change only on this thread, so they are still
  // what was copied.)
  double tau_new = live_new.tau(), tau_old = live_old.tau();
  bool same_requests = false;
  const bool alarm = live_old.rounds > 0 && tau_new < (1.0 - options_.rollback_margin) * tau_old;
  std::vector<train::TttSample> samples;
  for (const Completion& c : rep.completions) {
    const GenResult& g = c.result;
    if (alarm && g.aux.defined() && g.tokens.size() >= 2 && samples.size() < 32)
      samples.push_back(train::sample_of(g, rep.policy_version));
  }
  if (!samples.empty() && candidate.model && previous.model) {
    const train::InMemoryDataset data(std::move(samples));
    train::TttOptions to;
    to.steps = std::max<int64_t>(1, options_.engine.spec.steps);
    const DraftTarget target = policy->draft_target();
    tau_new = train::estimated_chain_tau(train::evaluate_drafter(train::TrainableDraft(*candidate.model, target), data, to));
    tau_old = train::estimated_chain_tau(train::evaluate_drafter(train::TrainableDraft(*previous.model, target), data, to));
    same_requests = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.rollback_confirmations += same_requests ? 1 : 0;
  const double bar = (1.0 - options_.rollback_margin) * tau_old;
  const bool comparable = same_requests || live_old.rounds > 0;
  if (comparable && tau_new < bar) {
    spdlog::warn("worker {}: drafter v{} tau {:.2f} fell below {:.2f} (v{} had {:.2f}, {}); rolling back", options_.id,
                 candidate.version, tau_new, bar, previous.version, tau_old,
                 same_requests ? "both estimated on this batch's completions" : "live, on different batches");
    banned_drafters_.insert(candidate.version);
    serving_ = previous;
    ++metrics_.rollbacks;
    previous_ = {};
    last_of_previous_ = live_old;  // the restored drafter's batch stays the bar for its next successor
    return;
  } else if (comparable) {
    spdlog::info("worker {}: drafter v{} kept: tau {:.2f} vs v{} {:.2f} ({})", options_.id, candidate.version, tau_new,
                 previous.version, tau_old, same_requests ? "same completions" : "live");
  }
  previous_ = {};
  last_of_previous_ = watch_new_;
}

Worker::Run Worker::run_engine(const PolicyModel& policy, Drafter& drafter, bool may_swap,
                               const std::vector<GenRequest>& requests, const std::vector<size_t>& indices,
                               int64_t depth, bool capture, int64_t* finished) {
  Run run;
  if (indices.empty())
    return run;
  EngineOptions eo = options_.engine;
  if (depth > 0 && depth < full_depth())
    eo.spec = SpecSettings{depth, 1, depth + 1};  // a shorter chain (adaptive speculation)
  Engine engine(policy, eo, drafter.model.get());
  std::map<uint64_t, size_t> index_of;
  for (size_t i : indices) {
    GenRequest r = requests[i];
    r.speculate = depth > 0;
    r.capture = capture && r.capture;  // generate() marks the requests to be recorded
    index_of[engine.submit(std::move(r))] = i;
  }
  // Timed from here: building the engine (zeroing its caches) costs the same at every depth
  // and would weigh on a small group's per-token cost more than on a large one's.
  const auto t0 = std::chrono::steady_clock::now();
  while (engine.has_work()) {
    std::vector<GenResult> done = engine.step();
    UPD_CHECK(!done.empty() || engine.running() > 0) << "worker: engine made no progress";
    for (GenResult& g : done) {
      const size_t i = index_of.at(g.id);
      run.tokens += static_cast<int64_t>(g.tokens.size());
      run.drafter_of[i] = drafter.version;
      run.done[i] = std::move(g);
    }
    if (!done.empty() && options_.on_progress) {
      *finished += static_cast<int64_t>(done.size());
      options_.on_progress(*finished, static_cast<int64_t>(requests.size()));
    }
    if (may_swap && !run.swapped && engine.has_work() && swap_in_staged(engine, drafter)) {
      run.swapped = true;
      run.spec_before = engine.stats().spec;  // the replaced drafter's rounds
    }
  }
  run.seconds = seconds_since(t0);
  run.spec = engine.stats().spec;
  if (run.swapped)
    run.spec.subtract(run.spec_before);  // the rounds since the swap
  return run;
}

void Worker::adaptive_update(int64_t depth, const Run& run) {
  adaptive_.observe(depth, run.seconds, run.tokens, run.spec);
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.spec_tps_estimate = adaptive_.predicted_tps(full_depth());
  metrics_.plain_tps_estimate = adaptive_.predicted_tps(0);
}

BatchReport Worker::generate(const std::vector<GenRequest>& requests, GenMode mode) {
  apply_staged();
  std::shared_ptr<const PolicyModel> policy;
  Drafter drafter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy = policy_;
    if (mode == GenMode::kServing)
      drafter = serving_;
    else if (mode == GenMode::kReference)
      drafter = reference_;
  }
  UPD_REQUIRE(mode == GenMode::kPlain || drafter.model != nullptr)
      << "Worker::generate: no " << gen_mode_name(mode) << " drafter";
  BatchReport rep;
  rep.mode = mode;
  {
    std::lock_guard<std::mutex> lock(mu_);  // versions are fixed for the whole batch
    rep.policy_version = policy_version_;
  }
  rep.drafter_version = drafter.version;

  const bool capture = mode == GenMode::kServing && sender_ != nullptr && options_.in_engine_capture;
  // Which completions become records: completion k of the worker's serving ones is kept when
  // floor((k + 1) r) > floor(k r), an even spread at exactly the rate r.
  std::vector<GenRequest> marked = requests;
  std::vector<bool> keep(requests.size(), true);
  if (mode == GenMode::kServing && options_.record_rate < 1.0)
    for (size_t i = 0; i < keep.size(); ++i, ++completions_seen_) {
      const double r = std::max(0.0, options_.record_rate);
      keep[i] = std::floor(static_cast<double>(completions_seen_ + 1) * r) > std::floor(static_cast<double>(completions_seen_) * r);
    }
  for (size_t i = 0; i < marked.size(); ++i)
    marked[i].capture = keep[i];
  std::vector<size_t> all(requests.size());
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = i;
  std::map<uint64_t, GenResult> done;
  const auto t0 = std::chrono::steady_clock::now();
  // Two groups: the probe requests (every probe_every-th, serving batches only) and the rest,
  // each decoded at its depth, as one engine run when the depths agree.
  const int64_t D = full_depth();
  const bool adaptive = mode == GenMode::kServing && options_.adaptive.enabled;
  int64_t rest_depth = mode == GenMode::kPlain ? 0 : D, probe_depth = rest_depth;
  if (adaptive && options_.adaptive.fixed_depth >= 0) {
    rest_depth = options_.adaptive.fixed_depth;
  } else if (adaptive) {
    rest_depth = adaptive_.choose();
    if (rest_depth == D && !adaptive_.plain_measured() && adaptive_.predicted_tps(D) > 0)
      probe_depth = 0;  // measure plain decoding on the probes
  }
  rep.depth = rest_depth;
  std::vector<size_t> probe, rest;
  const size_t every = static_cast<size_t>(std::max<int64_t>(1, options_.adaptive.probe_every));
  for (size_t i = 0; i < all.size(); ++i)
    (adaptive && rest_depth != probe_depth && i % every == 0 ? probe : rest).push_back(i);
  // The first run after a policy swap pays for cold caches (the new weights' first touch), so
  // the two runs take turns going first; otherwise that cost always lands on one side.
  const bool probe_first = probe.empty() || adaptive_order_++ % 2 == 0;
  int64_t depth_sum = 0, finished = 0;
  const uint64_t first_drafter = drafter.version;
  bool swapped = false;
  SpecStats full_old, full_new;  // full-settings rounds before and after a mid-batch swap
  std::map<uint64_t, uint64_t> drafter_of;
  for (const int k : {0, 1}) {
    const bool is_probe = (k == 0) == probe_first;
    const std::vector<size_t>& group = is_probe ? probe : rest;
    const int64_t d = is_probe ? probe_depth : rest_depth;
    if (group.empty())
      continue;
    const bool may_swap = mode == GenMode::kServing && options_.swap_mid_batch && !swapped;
    Run r = run_engine(*policy, drafter, may_swap, marked, group, d, capture, &finished);
    const auto n = static_cast<int64_t>(group.size());
    if (d == D) {
      (swapped || r.swapped ? full_new : full_old).merge(r.spec);
      full_old.merge(r.spec_before);
    } else {  // shortened chains, whichever drafter (plain runs count nothing)
      rep.spec_shortened.merge(r.spec);
      rep.spec_shortened.merge(r.spec_before);
    }
    swapped |= r.swapped;
    if (adaptive) {
      r.spec.merge(r.spec_before);
      adaptive_update(d, r);
    }
    rep.speculated += d > 0 ? n : 0;
    rep.at_full += d == D ? n : 0;
    depth_sum += d * n;
    done.merge(r.done);
    drafter_of.merge(r.drafter_of);
  }
  rep.spec = swapped ? full_new : full_old;
  if (swapped) {
    rep.spec_replaced = full_old;
    rep.replaced_drafter_version = first_drafter;
    rep.drafter_version = drafter.version;
  }
  rep.mean_depth = all.empty() ? 0.0 : static_cast<double>(depth_sum) / static_cast<double>(all.size());
  if (adaptive) {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.adaptive_depth_batches[static_cast<size_t>(rest_depth)];
    metrics_.adaptive_plain_batches = metrics_.adaptive_depth_batches[0];
  }
  rep.generate_seconds = seconds_since(t0);
  for (size_t i = 0; i < requests.size(); ++i) {
    Completion c{std::move(done.at(i)), rep.policy_version, drafter_of.at(i), keep[i]};
    rep.generated_tokens += static_cast<int64_t>(c.result.tokens.size());
    rep.completions.push_back(std::move(c));
  }

  if (mode == GenMode::kServing) {
    {  // by the drafter each completion finished with; time shared out by tokens
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.by_version[{rep.policy_version, rep.drafter_version}].spec.merge(rep.spec);
      if (rep.replaced_drafter_version != 0)
        metrics_.by_version[{rep.policy_version, rep.replaced_drafter_version}].spec.merge(rep.spec_replaced);
      for (const Completion& c : rep.completions) {
        WorkerMetrics::Cell& cell = metrics_.by_version[{rep.policy_version, c.drafter_version}];
        const auto n = static_cast<int64_t>(c.result.tokens.size());
        cell.tokens += n;
        cell.completions += 1;
        cell.seconds += rep.generated_tokens > 0 ? rep.generate_seconds * static_cast<double>(n) /
                                                       static_cast<double>(rep.generated_tokens)
                                                 : 0.0;
      }
    }
    if (drafter.model)
      watch_acceptance(rep);
  }
  return rep;
}

int64_t Worker::stream_records(const BatchReport& batch) {
  UPD_REQUIRE(sender_ != nullptr) << "Worker::stream_records: no record sender attached";
  // One sample per recorded completion, with the completion it came from (its drafter version
  // and speculation rounds go into its records).
  std::vector<train::TttSample> samples;
  std::vector<const Completion*> source, forwarded;
  std::vector<train::Rollout> rollouts;
  int64_t unrecorded = 0;
  for (const Completion& c : batch.completions) {
    const GenResult& g = c.result;
    if (!c.record)
      ++unrecorded;
    if (g.tokens.empty() || !c.record)
      continue;
    if (g.aux.defined()) {  // captured by the engine while generating
      samples.push_back(train::sample_of(g, batch.policy_version));
      source.push_back(&c);
    } else {
      rollouts.push_back({g.prompt, g.tokens});
      forwarded.push_back(&c);
    }
  }
  if (!rollouts.empty()) {  // not captured while generating: one forward of the serving policy
    std::shared_ptr<const PolicyModel> policy;
    std::vector<int64_t> aux_layers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (batch.policy_version != policy_version_)
        throw Error("Worker::stream_records: the batch's policy v" + std::to_string(batch.policy_version) +
                    " is no longer served (v" + std::to_string(policy_version_) + "): its aux states are gone");
      policy = policy_;
      if (serving_.model)
        aux_layers = serving_.model->aux_layers();
    }
    train::CaptureOptions copts = options_.capture;
    if (copts.aux_layers.empty())
      copts.aux_layers = aux_layers;
    for (train::TttSample& t : train::capture_samples(*policy, rollouts, copts, batch.policy_version))
      samples.push_back(std::move(t));
    source.insert(source.end(), forwarded.begin(), forwarded.end());
  }
  int64_t queued = 0, chunks = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    std::vector<train::TttSample> pieces;
    if (options_.record_max_tokens > 0)
      pieces = train::split_sample(samples[i], options_.record_max_tokens);
    else
      pieces.push_back(std::move(samples[i]));
    chunks += static_cast<int64_t>(pieces.size()) - 1;
    for (size_t k = 0; k < pieces.size(); ++k) {
      messaging::RecordData r = train::to_record(pieces[k]);
      r.worker = options_.id;
      r.drafter_version = source[i]->drafter_version;
      if (k == 0)  // a completion's rounds, once: in its first record
        r.rounds = train::round_stats(source[i]->result.rounds);
      queued += sender_->submit(std::move(r)) ? 1 : 0;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.completions_unrecorded += unrecorded;
  metrics_.record_chunks += chunks;
  return queued;
}

uint64_t Worker::policy_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_version_;
}

uint64_t Worker::drafter_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_.version;
}

WorkerMetrics Worker::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

}  // namespace updraft
