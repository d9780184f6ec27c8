// The generation engine: one per worker for its whole life. Requests join at any step and leave
// when they finish; each step runs one batched policy forward over the live batch, plain or
// speculative (EAGLE-3), and reads top-down:
//
//   schedule (scheduler.h) -> choose the depth (spec/adaptive.h) -> draft (spec/speculator.h)
//   -> run the policy (model_runner.h) -> verify and commit (commit.h) -> capture
//   (capture/step_capture.h) -> keep the drafter's pairs -> account and hand back what finished
//
// The draft runs at the start of the step that verifies it, not at the end of the one before:
// the depth is then chosen for the batch that will actually verify (requests that joined or
// left in between count), and a plain step costs the drafter nothing (its pairs wait, bounded
// by EngineOptions::draft_backlog).
//
// Requests. submit() validates and queues (FCFS); the request runs from the next step. Each step
// returns the requests that finished in it; a request's tokens can also be streamed as they are
// emitted (GenRequest::on_tokens). abort() ends a request at the next step, freeing its blocks.
// KV blocks are reserved as sequences grow; when the cache runs out the youngest sequence is
// preempted and later recomputed (scheduler.h). A request that could not fit the whole cache on
// its own is refused by submit() with an Error that says so; nothing else is affected.
//
// Speculation (with a drafter, for requests that do not opt out): the drafter absorbs the
// committed (aux state, next token) pairs and proposes a tree per sequence (drafter/proposer.h)
// at the step's depth; the policy verifies every tree in the step's forward; the target KV keeps
// the root and the accepted path only; verification accepts a path and adds a bonus token
// (spec/verifier.h). Depth: a DepthChooser's choice per step (set_depth_chooser), else always
// the full settings (EngineOptions::spec); when the chooser asks for a canary, the decoding
// sequence with the fewest pairs to absorb drafts at the full settings beside it. Drafters can be set, replaced or
// removed between steps with sequences in flight (set_drafter).
//
// Sampling (per request): the logits first pass the logit processors (logit_process.h:
// penalties, min_new_tokens, min_p), each row with its own context (for a draft-tree row, the
// output so far plus the tree path), so plain and speculative decoding see identical rows.
// Temperature 0 = greedy (argmax, lowest id on ties); otherwise the
// token is drawn from softmax(logits / temperature), filtered by top_k then top_p and
// renormalised (ops::sampling_probs), with uniform01(seed, i) for the i-th output token, so a
// seeded request gives the same tokens whatever else is in the batch, after a preemption too.
// Speculative requests follow the same distribution exactly.
//
// Logprobs: for every output token, the log-probability under the distribution it was drawn
// from (the temperature-scaled, top-k/top-p filtered, renormalised policy: the RL convention).
// For greedy requests it is the log-probability under the unscaled, unfiltered policy,
// log_softmax(logits). Speculative decoding reports the same quantity.
//
// Stopping: a token in stop_token_ids (and the model's eos ids unless ignore_eos) ends the
// request with finish reason "stop"; that token is included; so does GenRequest::stop_check
// (the caller's stop strings) when it returns >= 0. Otherwise "length" after
// max_new_tokens; "abort" after abort(), with the tokens emitted so far.
//
// Suffix drafts (EngineOptions::suffix, spec/suffix_drafts.h): model-free candidates from the
// request's group and from recent completions, grafted onto every decoding round of a request
// that may speculate (probes excepted: they measure the drafter alone), with or without a drafter
// and at any depth the chooser picks (0 included); verified like the drafter's, so just as lossless.
// With suffix.gate, a SuffixGate (spec/suffix_gate.h) decides per step whether they run, by the
// throughput measured with and without them at the live batch. When they do, the indexes are
// looked up before the depth is chosen, and the chooser is told how far the candidates reach
// (DepthChooser's suffix class); they are grafted after the drafter has built its tree.
//
// Prefix reuse (EngineOptions::prefix_reuse, prefix_reuse.h): a request whose context begins like
// one already cached (a sibling's prompt, an earlier turn) takes that prefix over instead of
// prefilling it; finished requests' caches are kept as donors until their blocks are needed.
//
// Capture: capture/step_capture.h. Metrics: EngineStats, and per request GenResult::spec,
// rounds and the scheduling fields. tau = 1 + accepted / rounds (eagle3.md E.1).
//
// Thread safety: none. One thread owns the engine (a worker's engine thread); callbacks run on it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "drafter/draft_model.h"
#include "kernels/nn/kv_cache.h"
#include "rollout/engine/model_runner.h"
#include "rollout/engine/request.h"
#include "rollout/engine/scheduler.h"
#include "rollout/policy_model.h"
#include "rollout/spec/adaptive.h"
#include "rollout/spec/suffix_gate.h"

namespace updraft {

struct Committed;

class Engine {
 public:
  // The drafter (optional) must fit the policy; both must outlive their use.
  Engine(const PolicyModel& model, const EngineOptions& opts = {}, const DraftModel* drafter = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  uint64_t submit(GenRequest req);  // throws Error for a bad request
  bool abort(uint64_t id);          // false when no such request is waiting or running
  std::vector<GenResult> step();    // one step; the requests that finished (or were aborted) in it
  std::vector<GenResult> run();     // steps until every submitted request has finished, by id
  // Without a step: the requests aborted so far leave now (their blocks freed) and come back.
  std::vector<GenResult> flush_aborted();
  // Every running request goes back to the queue, its KV freed (recomputed when it runs again).
  int64_t retract();

  // Replaces the drafter between steps (nullptr: none, plain decoding). Every running sequence
  // that may speculate gets its pairs recomputed for the new drafter (aux states from a policy
  // forward over its committed tokens into a scratch cache) and drafts with it from the next step;
  // greedy requests give the same tokens as without the swap, sampled ones keep their
  // distribution. The new drafter must fit the policy and read the engine's aux layers. Throws
  // Error, with the old drafter and its caches still serving, if it does not fit or its cache
  // cannot hold the sequences in flight. Cost: about one prefill of every in-flight sequence.
  void set_drafter(const DraftModel* drafter);
  // A new policy (and its drafter, rebound to it). REQUIRES: no sequence running (waiting ones
  // stay queued); the new policy must have the same shape (Error otherwise).
  void set_policy(const PolicyModel& model, const DraftModel* drafter);
  // Closed: no waiting request is admitted (running ones go on); used to drain before a policy swap.
  void set_admission(bool open) { admission_open_ = open; }
  // Finished requests kept as prefix donors (EngineOptions::prefix_reuse; scheduler.h), and
  // giving their blocks back (a cache flush).
  int64_t prefix_donors() const { return scheduler_.donors(); }
  int64_t prefix_donor_blocks() const { return scheduler_.donor_blocks(); }  // free on demand
  void drop_prefix_donors() { scheduler_.drop_donors(); }
  // null: the full settings every step. The chooser must outlive its use.
  void set_depth_chooser(DepthChooser* chooser) { chooser_ = chooser; }

  // A request's state between steps: positions in the policy's cache, output tokens so far, and
  // the most recent tree it verified with drafts. All empty when it is not running.
  struct InFlight {
    int64_t cached = 0;
    std::vector<int32_t> tokens;
    DraftTree tree;
  };
  InFlight in_flight(uint64_t id) const;
  bool has_work() const;
  std::vector<uint64_t> waiting_ids() const;  // queued, not yet admitted (FCFS order)
  std::vector<uint64_t> running_ids() const;
  int64_t running() const { return static_cast<int64_t>(scheduler_.running().size()); }
  int64_t waiting() const { return static_cast<int64_t>(scheduler_.waiting().size()); }
  const EngineStats& stats() const { return stats_; }
  // The parts of the policy forwards of steps without prefill (verification and plain decode),
  // summed: what the benchmarks' round anatomy compares its standalone forwards with.
  const ForwardProfile& decode_forward_parts() const { return decode_parts_; }
  const KvCache& cache() const { return cache_; }
  const KvCache* draft_cache() const { return draft_cache_.get(); }
  const SuffixDrafts& suffix_drafts() const { return suffix_; }
  const DrawChooser& draws() const { return draws_; }
  const SuffixGate* suffix_gate() const { return suffix_gate_.get(); }
  const DraftModel* drafter() const { return drafter_; }
  const EngineOptions& options() const { return opts_; }
  const PolicyModel& model() const { return *model_; }
  const std::vector<int64_t>& aux_layers() const { return aux_layers_; }

  // Checks a request against the model and limits; throws Error naming the problem. With
  // cache_blocks > 0 it must also fit alone in a cache of that many blocks at its longest, with a
  // speculation round's tree (then it always finishes: the oldest sequence is never preempted).
  static void validate(const GenRequest& req, const PolicyConfig& cfg, const EngineOptions& opts = {},
                       int64_t cache_blocks = 0);
  // The aux layers an engine built with these captures (see EngineOptions::capture_aux_layers).
  static std::vector<int64_t> capture_layers(const EngineOptions& opts, const DraftModel* drafter,
                                             const PolicyConfig& cfg);

 private:
  struct Drafted {
    double seconds = 0;
    int64_t absorbed = 0;  // pairs the drafter absorbed
    std::vector<Seq*> proposers;
    int64_t grafted = 0;  // suffix nodes grafted onto the trees afterwards (graft_suffix)
  };
  int64_t choose_depth(const StepPlan& plan, int suffix);
  Drafted draft(const StepPlan& plan, int64_t depth);
  // The step's suffix class (DepthChooser) if it grafts suffix drafts, else kNoSuffix; `found`: the
  // candidates by entry. A step whose lookups found none grafts none without asking the gate (its
  // cost is any plain or drafter step's); one that found some grafts them if the gate chooses to
  // (gated: the gate was asked, and observes the step).
  int plan_suffix(const StepPlan& plan, std::vector<SuffixFound>& found, bool& gated);
  // The suffix indexes' candidates for each entry that grafts (found, by entry), and the step's
  // suffix class (DepthChooser).
  int look_up_suffix(const StepPlan& plan, std::vector<SuffixFound>& found);
  static bool grafts(const Seq& s) { return s.req.speculate && !s.req.probe; }  // a decoding one, when the step does
  // Drafts at the full settings whatever the step's depth: a probe, or this step's canary.
  bool full_settings(const Seq& s) const { return s.req.probe || s.id == canary_; }
  // Grafts the candidates of path probability min_prob or more; returns the nodes grafted.
  int64_t graft_suffix(const StepPlan& plan, const std::vector<SuffixFound>& found, double min_prob);
  // The grafting step's suffix nodes, predicted against accepted, into calibration_.
  void calibrate_suffix(const StepPlan& plan, const std::vector<Committed>& committed);
  void observe_suffix(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run, double seconds,
                      bool grafted);
  void keep_pairs_of(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run);
  void stream(const StepPlan& plan, const std::vector<Committed>& committed, int64_t step);
  void account(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run, int64_t depth,
               const Drafted& drafted, double seconds, int suffix);
  std::vector<GenResult> finish(int64_t step);
  std::unique_ptr<KvCache> make_draft_cache(const DraftModel& d) const;
  // Makes `d` (checked) the drafter with `cache` as its draft cache (engine_swap.cc).
  void attach(const DraftModel* d, std::unique_ptr<KvCache> cache);
  static SchedulerLimits limits_of(const EngineOptions& o, bool drafter);
  // The checks a drafter must pass to serve this policy with these settings and aux layers.
  static void check_fits(const PolicyModel& model, const DraftModel& drafter, const SpecSettings& spec,
                         const std::vector<int64_t>& aux_layers);

  const PolicyModel* model_;
  EngineOptions opts_;
  const DraftModel* drafter_ = nullptr;
  std::vector<int64_t> aux_layers_;
  KvCache cache_;
  std::unique_ptr<KvCache> draft_cache_;
  Scheduler scheduler_;
  SuffixDrafts suffix_;
  std::unique_ptr<SuffixGate> suffix_gate_;  // with EngineOptions::suffix.gate
  SuffixCalibration calibration_;            // divides the bar grafted nodes must clear
  DepthChooser* chooser_ = nullptr;
  DrawChooser draws_;  // whether sampling requests' chains draw their drafts (EngineOptions::draft_sampling)
  struct {
    double q_overlap = 0, q_top = 0;
    int64_t q_nodes = 0;
  } draws_seen_;  // stats_' q measures the chooser has seen
  bool admission_open_ = true;
  uint64_t next_id_ = 1, drafter_generation_ = 0;
  uint64_t canary_ = 0;  // this step's canary's id (DepthChooser::canary; 0: none)
  EngineStats stats_;
  ForwardProfile decode_parts_;
  // Steps since a prefill of many rows: the next few steps' costs are not typical
  // (StepSample::cold).
  int64_t steps_since_cold_ = 1 << 20;
  static constexpr int64_t kColdSteps = 3;  // see engine.cc
  bool cold_step() const { return steps_since_cold_ < kColdSteps; }
};

}  // namespace updraft
