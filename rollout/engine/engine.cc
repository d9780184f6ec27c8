#include "rollout/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/core/error.h"
#include "kernels/ops.h"
#include "rollout/capture/step_capture.h"
#include "rollout/engine/commit.h"
#include "rollout/spec/speculator.h"

namespace updraft {
namespace {

using Clock = std::chrono::steady_clock;

// What makes the next steps' costs untypical for the depth chooser: a step prefilling at least
// this many rows (it keeps the cores away from the decode working set for tens of ms), and for
// how many steps (measured on a shared 2-core host: after 30 ms away from the built-in policy's
// weights, prefilling or idle, the next two steps took 2.2x, the third 1.6x). Idle gaps are not
// counted: on a loaded host every step can follow one, and the chooser would learn no cost.
constexpr int64_t kColdPrefillRows = 64;  // and Engine::kColdSteps

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

SchedulerLimits Engine::limits_of(const EngineOptions& o, bool drafter) {
  SchedulerLimits l;
  l.max_batch = o.max_batch;
  l.prefill_chunk = o.prefill_chunk;
  l.tree_rows = drafter ? o.spec.draft_tokens : 1;
  l.draft_scratch = drafter ? o.spec.scratch_entries() : 0;
  l.suffix_rows = o.suffix.rows();
  l.reuse_prefixes = o.prefix_reuse;
  l.kept_donors = o.prefix_donors;
  return l;
}

Engine::Engine(const PolicyModel& model, const EngineOptions& opts, const DraftModel* drafter)
    : model_(&model),
      opts_(opts),
      cache_(model.kv_shape(), KvCache::blocks_for_bytes(model.kv_shape(), opts.block_size, opts.kv_cache_bytes),
             opts.block_size),
      scheduler_(limits_of(opts, false)),
      suffix_(opts.suffix),
      draws_(opts.draft_sampling) {
  UPD_REQUIRE(opts.max_batch > 0 && opts.prefill_chunk > 0) << "engine: max_batch and prefill_chunk must be positive";
  UPD_REQUIRE(opts.capture_teacher_k >= 1 && opts.draft_backlog >= 1)
      << "engine: capture_teacher_k and draft_backlog must be at least 1";
  UPD_REQUIRE(opts.prefix_donors >= 0) << "engine: prefix_donors must not be negative";
  aux_layers_ = capture_layers(opts, drafter, model.config());
  if (opts.suffix.on() && opts.suffix.gate)
    suffix_gate_ = std::make_unique<SuffixGate>();
  scheduler_.set_caches(&cache_, nullptr);
  if (drafter != nullptr) {
    check_fits(model, *drafter, opts_.spec, aux_layers_);
    attach(drafter, make_draft_cache(*drafter));
  }
}

Engine::~Engine() = default;

std::unique_ptr<KvCache> Engine::make_draft_cache(const DraftModel& d) const {
  return std::make_unique<KvCache>(
      d.kv_shape(), KvCache::blocks_for_bytes(d.kv_shape(), opts_.block_size, opts_.draft_kv_cache_bytes),
      opts_.block_size);
}

void Engine::validate(const GenRequest& req, const PolicyConfig& cfg, const EngineOptions& opts, int64_t cache_blocks) {
  const SamplingParams& p = req.params;
  UPD_REQUIRE(!req.prompt.empty()) << "empty prompt";
  for (size_t i = 0; i < req.prompt.size(); ++i)
    UPD_REQUIRE(req.prompt[i] >= 0 && req.prompt[i] < cfg.vocab_size)
        << "prompt token " << i << " has id " << req.prompt[i] << ", outside the vocabulary [0, " << cfg.vocab_size
        << ")";
  UPD_REQUIRE(p.max_new_tokens >= 1) << "max_new_tokens must be at least 1 (got " << p.max_new_tokens << ")";
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + std::min(p.max_new_tokens, cfg.max_position_embeddings);
  UPD_REQUIRE(p.max_new_tokens <= cfg.max_position_embeddings && total <= cfg.max_position_embeddings)
      << "prompt of " << req.prompt.size() << " tokens + max_new_tokens " << p.max_new_tokens
      << " exceeds the model's context of " << cfg.max_position_embeddings << " tokens";
  UPD_REQUIRE(std::isfinite(p.temperature) && p.temperature >= 0)
      << "temperature must be a finite number >= 0 (got " << p.temperature << ")";
  UPD_REQUIRE(p.top_k >= 0) << "top_k must be >= 0 (0 disables it; got " << p.top_k << ")";
  UPD_REQUIRE(req.input_logprobs_from >= -1 && req.input_logprobs_from < static_cast<int64_t>(req.prompt.size()))
      << "the input logprobs' start must be in [-1, " << req.prompt.size() << ") (got " << req.input_logprobs_from << ")";
  UPD_REQUIRE(req.top_logprobs >= 0 && req.top_logprobs <= cfg.vocab_size)
      << "top logprobs must be in [0, " << cfg.vocab_size << "] (got " << req.top_logprobs << ")";
  UPD_REQUIRE(p.top_p > 0 && p.top_p <= 1) << "top_p must be in (0, 1] (got " << p.top_p << ")";
  for (int32_t s : p.stop_token_ids)
    UPD_REQUIRE(s >= 0 && s < cfg.vocab_size) << "stop token id " << s << " is outside the vocabulary";
  UPD_REQUIRE(p.min_p >= 0 && p.min_p <= 1) << "min_p must be in [0, 1] (got " << p.min_p << ")";
  UPD_REQUIRE(p.min_new_tokens >= 0) << "min_new_tokens must be >= 0 (got " << p.min_new_tokens << ")";
  UPD_REQUIRE(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0)
      << "repetition_penalty must be a finite number > 0 (got " << p.repetition_penalty << ")";
  for (const auto& [name, v] : {std::pair<const char*, float>{"frequency_penalty", p.frequency_penalty},
                                {"presence_penalty", p.presence_penalty}})
    UPD_REQUIRE(std::isfinite(v) && v >= -2 && v <= 2) << name << " must be in [-2, 2] (got " << v << ")";
  if (cache_blocks <= 0)
    return;
  const int64_t len = total + std::max<int64_t>(1, opts.spec.draft_tokens) + opts.suffix.rows();
  const int64_t need = (len + opts.block_size - 1) / opts.block_size;
  UPD_REQUIRE(need <= cache_blocks) << "request needs " << need << " KV blocks but the whole cache has "
                                    << cache_blocks << "; lower max_new_tokens or grow the cache";
}

std::vector<int64_t> Engine::capture_layers(const EngineOptions& opts, const DraftModel* drafter,
                                            const PolicyConfig& cfg) {
  return !opts.capture_aux_layers.empty() ? opts.capture_aux_layers
         : drafter != nullptr             ? drafter->aux_layers()
                                          : cfg.default_aux_layers();
}

uint64_t Engine::submit(GenRequest req) {
  validate(req, model_->config(), opts_, cache_.num_blocks());
  if (req.capture)  // checked here: a model too shallow for the default layers can still decode
    model_->check_aux_layers(aux_layers_);
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->seed = req.params.has_seed ? req.params.seed : ops::mix64(opts_.seed ^ ops::mix64(s->id));
  s->result.id = s->id;
  s->result.prompt = req.prompt;
  if (req.input_logprobs_from >= 0)
    s->result.input_logprobs.assign(req.prompt.size() - static_cast<size_t>(req.input_logprobs_from),
                                    std::numeric_limits<float>::quiet_NaN());
  s->result.submitted_step = stats_.steps;
  s->req = std::move(req);
  const uint64_t id = s->id;
  if (s->req.speculate && !s->req.probe)
    suffix_.join(id, s->req.group, s->req.prompt);
  scheduler_.add(std::move(s));
  return id;
}

bool Engine::abort(uint64_t id) { return scheduler_.abort(id); }

bool Engine::has_work() const { return !scheduler_.running().empty() || !scheduler_.waiting().empty(); }

std::vector<GenResult> Engine::step() {
  const auto t0 = Clock::now();
  const int64_t index = stats_.steps;
  const StepPlan plan = scheduler_.schedule(admission_open_, index);
  if (plan.entries.empty())
    return finish(index);
  std::vector<SuffixFound> found;
  bool gated = false;
  const int suffix = plan_suffix(plan, found, gated);
  const bool grafted = suffix != DepthChooser::kNoSuffix;
  const int64_t depth = choose_depth(plan, suffix);
  Drafted drafted = draft(plan, depth);
  if (grafted) {  // nodes that pay for their rows at this batch and depth (DepthChooser::row_worth)
    const double bar =
        chooser_ != nullptr ? chooser_->row_worth(plan.decoding, depth, suffix) / calibration_.factor() : 0.0;
    drafted.grafted = graft_suffix(plan, found, bar);
    ++stats_.suffix_steps;
    stats_.suffix_bar_sum += bar;
  }
  RunOptions ro;
  for (const StepEntry& e : plan.entries) {
    ro.aux |= e.seq->spec || e.seq->req.capture;
    ro.capture |= e.seq->req.capture;
  }
  ro.aux_layers = aux_layers_;
  ro.eos_token_ids = model_->config().eos_token_ids;
  if (plan.prefill_tokens == 0)
    ro.profile = &decode_parts_;
  const RunOut run = run_policy(*model_, cache_, plan, ro);
  const std::vector<Committed> committed =
      verify_commit(plan, run, cache_, {model_->config().eos_token_ids, opts_.accept_rule, model_->config().vocab_size},
                    stats_);
  stats_.capture_seconds += capture_step(plan, committed, run, opts_.capture_teacher_k) +
                            run.logp_only_for_capture_seconds;
  keep_pairs_of(plan, committed, run);
  for (size_t e = 0; e < plan.entries.size(); ++e)
    suffix_.extend(plan.entries[e].seq->id, committed[e].tokens);
  stream(plan, committed, index);
  const double seconds = seconds_since(t0);
  account(plan, committed, run, depth, drafted, seconds, suffix);
  if (gated)
    observe_suffix(plan, committed, run, seconds, grafted);
  if (drafted.grafted > 0)
    calibrate_suffix(plan, committed);
  ++steps_since_cold_;
  if (plan.prefill_tokens >= kColdPrefillRows)
    steps_since_cold_ = 0;
  return finish(index);
}

int64_t Engine::choose_depth(const StepPlan& plan, int suffix) {
  bool any = false;
  int64_t backlog = 0;  // pairs beyond what one step commits (at most a full tree's rows)
  for (const StepEntry& e : plan.entries)
    if (e.prefill == 0 && e.seq->spec) {
      any = true;
      backlog += std::max<int64_t>(0, e.seq->pending() - (opts_.spec.steps + 1));
    }
  canary_ = 0;
  if (drafter_ == nullptr || !any)
    return 0;
  if (chooser_ == nullptr)
    return opts_.spec.steps;
  const int64_t depth = chooser_->choose(plan.decoding, backlog, suffix);
  // A canary (DepthChooser::canary): the decoding sequence with the fewest pairs to absorb first.
  const Seq* pick = nullptr;
  if (depth != opts_.spec.steps && chooser_->canary())
    for (const StepEntry& e : plan.entries)
      if (e.prefill == 0 && e.seq->spec && !e.seq->req.probe && (pick == nullptr || e.seq->pending() < pick->pending()))
        pick = e.seq;
  if (pick != nullptr) {
    canary_ = pick->id;
    ++stats_.canary_steps;
  }
  return depth;
}

Engine::Drafted Engine::draft(const StepPlan& plan, int64_t depth) {
  Drafted d;
  if (drafter_ == nullptr)
    return d;
  // Proposers at the step's depth, probes and the canary at the full settings (one group when they agree), and
  // sequences that absorb a backlog without drafting.
  std::vector<Seq*> at_depth, at_full, absorb;
  for (const StepEntry& e : plan.entries) {
    Seq* s = e.seq;
    if (!s->spec)
      continue;
    if (e.prefill == 0 && (full_settings(*s) || depth > 0))
      (full_settings(*s) && depth != opts_.spec.steps ? at_full : at_depth).push_back(s);
    else if (s->pending() >= opts_.draft_backlog)
      absorb.push_back(s);
  }
  if (at_depth.empty() && at_full.empty() && absorb.empty())
    return d;
  const auto t0 = Clock::now();
  SpecSettings full = opts_.spec;
  full.sample_drafts = draws_.draw();
  full.measure_drafts = opts_.draft_sampling != DraftSampling::kOff;
  if (!at_depth.empty() || !absorb.empty())
    d.absorbed +=
        draft_step(*drafter_, *draft_cache_, at_depth, absorb, depth > 0 ? settings_at_depth(full, depth) : full);
  if (!at_full.empty())
    d.absorbed += draft_step(*drafter_, *draft_cache_, at_full, {}, full);
  d.seconds = seconds_since(t0);
  d.proposers = std::move(at_depth);
  d.proposers.insert(d.proposers.end(), at_full.begin(), at_full.end());
  return d;
}

void Engine::keep_pairs_of(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run) {
  std::vector<Seq*> seqs;
  std::vector<std::vector<int32_t>> rows, tokens;
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    Seq* s = plan.entries[e].seq;
    // A finished sequence's pairs matter only to a next turn that takes them (a kept donor).
    if (!s->spec || (s->finished() && !scheduler_.keeps_as_donor(*s)) || drafter_ == nullptr)
      continue;
    const Committed& c = committed[e];
    std::vector<int32_t> toks;
    for (size_t i = 0; i < c.rows.size(); ++i) {
      const int64_t next = c.first_pos + static_cast<int64_t>(i) + 1;
      if (s->finished() && next >= s->prompt_len() + s->out_len())
        break;  // a stop inside the round: its last rows have no next token (a donor takes fewer pairs)
      UPD_CHECK(next < s->prompt_len() + s->out_len()) << "engine: pair " << next - 1 << " has no next token";
      toks.push_back(s->token_at(next));
    }
    seqs.push_back(s);
    rows.emplace_back(c.rows.begin(), c.rows.begin() + static_cast<std::ptrdiff_t>(toks.size()));
    tokens.push_back(std::move(toks));
  }
  if (!seqs.empty())
    keep_pairs(seqs, rows, tokens, run.fo.aux);
}

void Engine::stream(const StepPlan& plan, const std::vector<Committed>& committed, int64_t step) {
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    Seq& s = *plan.entries[e].seq;
    const Committed& c = committed[e];
    if (c.tokens.empty())
      continue;
    if (s.result.first_token_step < 0)
      s.result.first_token_step = step;
    if (s.req.on_tokens)
      s.req.on_tokens(s.id, c.tokens, c.logprobs);
  }
}

std::vector<GenResult> Engine::finish(int64_t step) {
  std::vector<GenResult> out;
  const int64_t W = static_cast<int64_t>(aux_layers_.size()) * model_->config().hidden_size;
  for (std::unique_ptr<Seq>& s : scheduler_.collect_finished()) {
    s->result.finished_step = step;
    suffix_.leave(s->id, s->result.finish_reason != "abort", s->result.prompt, s->result.tokens);
    if (s->result.finish_reason == "abort") {
      ++stats_.aborted;
    } else if (s->req.capture) {
      const auto t0 = Clock::now();
      finish_capture(*s, W);
      stats_.capture_seconds += seconds_since(t0);
    }
    out.push_back(std::move(s->result));
  }
  return out;
}

std::vector<GenResult> Engine::run() {
  std::vector<GenResult> all;
  while (has_work()) {
    UPD_CHECK(admission_open_ || running() > 0) << "engine: run() with admission closed and nothing running";
    auto d = step();
    all.insert(all.end(), std::make_move_iterator(d.begin()), std::make_move_iterator(d.end()));
  }
  std::sort(all.begin(), all.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  return all;
}

std::vector<GenResult> Engine::flush_aborted() {
  scheduler_.remove_aborted();
  return finish(stats_.steps);
}

int64_t Engine::retract() {
  const int64_t n = scheduler_.retract_all();
  stats_.preemptions = scheduler_.preemptions();
  stats_.recomputed_tokens = scheduler_.recomputed_tokens();
  stats_.reused_tokens = scheduler_.reused_tokens();
  return n;
}

std::vector<uint64_t> Engine::running_ids() const {
  std::vector<uint64_t> ids;
  for (const auto& s : scheduler_.running())
    ids.push_back(s->id);
  return ids;
}

std::vector<uint64_t> Engine::waiting_ids() const {
  std::vector<uint64_t> ids;
  for (const auto& s : scheduler_.waiting())
    ids.push_back(s->id);
  return ids;
}

Engine::InFlight Engine::in_flight(uint64_t id) const {
  for (const auto& s : scheduler_.running())
    if (s->id == id)
      return {s->kv.length, s->result.tokens, s->last_tree};
  return {};
}

}  // namespace updraft
