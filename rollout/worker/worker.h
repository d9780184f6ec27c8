// A rollout worker: generates completions with the serving policy and drafter versions, turns
// them into training records (aux states + teacher top-k) streamed to the buffer, and
// hot-swaps new versions of either model.
//
// Hot-swap contract (design.md §6):
//  * offer_policy / offer_drafter (any thread) load the new version BESIDE the serving one and
//    validate it: manifest and sha256 of every file (kernels/io/weight_version.h), the model's
//    header, names, shapes and dtypes (its loader), version order (strictly newer than the
//    serving and staged ones), and for a drafter that it fits the policy. A rejected offer
//    leaves everything as it was, is logged and counted (rejected_policy / rejected_drafter).
//  * An accepted version is staged; the worker thread swaps it in at its next batch boundary,
//    and a drafter also between the engine's steps of a serving batch (swap_mid_batch, at most
//    once per batch): Engine::swap_drafter rebuilds the draft cache of every sequence in flight
//    over its committed tokens and re-proposes its next tree, so the new drafter serves from the
//    next speculation round. A policy swaps only between batches (a completion comes from one
//    policy version), and a drafter staged together with a policy waits for it (it was loaded
//    against that policy's embedding table). A new policy rebinds the serving drafters to its
//    embedding table. The old version is freed when the last run using it is done (shared
//    ownership).
//  * After a drafter swap the worker watches acceptance: once `rollback_rounds` speculative
//    rounds have run on the new drafter, it compares the new drafter's live τ with the previous
//    one's on its last batch. Above (1 − rollback_margin) × the previous one's, the new drafter
//    stays. Below, the alarm is confirmed on the same requests when the batch captured aux
//    states: both drafters' chain acceptance estimated teacher-forced on its completions (a
//    change of prompts moves live τ without any fault of the drafter). Still below the bar, the
//    previous drafter is restored (logged, counted), and that version is never taken again.
//    The live bar is the previous drafter's most recent batch: a drafter swapped in right after
//    a batch of unusually hard requests meets a low bar, and a damaged one can pass it; it then
//    serves until the next version (the trainer promotes only candidates that beat its serving
//    drafter on held-out records). Confirming every swap on the same completions would close
//    that gap at about the cost of decoding them again, on every swap.
//  * Every completion carries the policy and drafter versions it was generated with (after a
//    mid-batch swap: the drafter serving when it finished); the worker's metrics are labelled
//    by both, and a batch's acceptance is split at a mid-batch swap (BatchReport::spec counts
//    the new drafter's rounds, spec_replaced the old one's).
//
// Adaptive speculation (WorkerOptions::adaptive, serving batches only): speculate only as far as
// it pays. A stale or still-learning drafter with low acceptance makes speculative decoding
// slower than plain decoding (anchors.md), and a chain's later positions, rarely accepted, cost
// a draft step each and verify rows, so each serving batch runs at the chain depth (0: plain;
// 1..steps with a chain, only the full settings with a tree) with the highest predicted
// throughput: acceptance per draft position and seconds per round of each depth, measured on
// the worker's own runs (rollout/worker/adaptive_spec.h). Every probe_every-th request of a
// batch (at least one) always runs the full settings, as its own engine run when the rest does
// not, so the drafter's acceptance at every position stays measured and a drafter that has
// improved is noticed at the next batch (until plain decoding has been measured, the probes are
// decoded plainly instead and the rest at the full settings). Requests not at the full settings are captured like the
// others (same records). The estimates assume the worker's batches have a similar shape (one
// batch size); per-batch-size buckets are not kept. BatchReport::spec (the live acceptance the
// rollback watch reads, and τ everywhere else) counts only requests at the full settings;
// shortened chains are in spec_shortened.
//
// Modes of generate(): kServing (speculative with the serving drafter), kReference (speculative
// with a fixed reference drafter, e.g. a frozen copy to compare against), kPlain (no drafter).
// stream_records() turns a batch into training records and submits them to the sender: the
// aux states and teacher top-k the engine captured while generating (serving batches with a
// sender and in_engine_capture), else one policy forward over each sequence
// (trainer/capture.h). It never waits for the buffer (RecordSender's bounded queue sheds).
// Thread safety: generate() from one thread; offers and metrics() from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "drafter/draft_model.h"
#include "messaging/record_sender.h"
#include "rollout/engine.h"
#include "rollout/policy_model.h"
#include "rollout/worker/adaptive_spec.h"
#include "trainer/capture.h"

namespace updraft {

struct AdaptiveSpecOptions {
  bool enabled = false;
  int64_t probe_every = 4;  // one request in probe_every always runs the full settings
  double ema = 0.5;         // weight of the newest run in each estimate (reach, cost)
  bool shorter_chains = true;  // with a chain, also consider depths 1..steps-1 (else: all or plain)
  int64_t fixed_depth = -1;    // 0..steps: the non-probe requests always run at it (measurements, tests)
};

struct WorkerOptions {
  uint32_t id = 0;
  AdaptiveSpecOptions adaptive;
  EngineOptions engine;
  train::CaptureOptions capture;
  bool in_engine_capture = true;  // serving batches carry their records' data (no extra pass)
  // Record volume: the share of serving completions that become records (evenly spread over the
  // worker's completions, deterministic), and the positions per record (longer completions are
  // split, trainer/capture.h split_sample; 0: no cap). Completions not recorded are not captured.
  double record_rate = 1.0;
  int64_t record_max_tokens = 0;
  double rollback_margin = 0.2;
  int64_t rollback_rounds = 64;
  bool swap_mid_batch = true;  // a staged drafter also swaps in between a serving batch's steps
  // Called on the worker thread after each engine step in which requests finished: requests
  // finished and in the batch (progress of long batches; may offer versions).
  std::function<void(int64_t finished, int64_t total)> on_progress;
};

enum class GenMode { kServing, kReference, kPlain };
const char* gen_mode_name(GenMode m);

struct Completion {
  GenResult result;
  uint64_t policy_version = 0, drafter_version = 0;  // drafter 0 for plain decoding; serving when it finished
  bool record = true;  // stream_records makes records of it (WorkerOptions::record_rate)
};

struct BatchReport {
  GenMode mode = GenMode::kServing;
  std::vector<Completion> completions;  // in request order
  uint64_t policy_version = 0, drafter_version = 0;  // drafter: serving at the end of the batch
  SpecStats spec;            // over the requests decoded at the full speculation settings
  // A drafter swapped in mid-batch: the version it replaced and that one's rounds at the full
  // settings (spec then counts the new drafter's only); 0 and empty without one.
  uint64_t replaced_drafter_version = 0;
  SpecStats spec_replaced;
  SpecStats spec_shortened;  // over those adaptive speculation ran at a shorter chain
  int64_t generated_tokens = 0;
  double generate_seconds = 0;
  int64_t speculated = 0;  // requests decoded speculatively at any depth (all but kPlain's unless adaptive)
  int64_t depth = 0;       // chain depth of the non-probe requests (0: plain; steps: full settings)
  int64_t at_full = 0;     // requests decoded at the full settings (probes included)
  double mean_depth = 0;   // chain depth per request (0 for plain)
  double tokens_per_second() const { return generate_seconds > 0 ? generated_tokens / generate_seconds : 0.0; }
};

struct WorkerMetrics {
  struct Cell {
    SpecStats spec;
    int64_t tokens = 0, completions = 0;
    double seconds = 0;
  };
  std::map<std::pair<uint64_t, uint64_t>, Cell> by_version;  // (policy, drafter) -> serving-mode totals
  int64_t policy_swaps = 0, drafter_swaps = 0, rejected_policy = 0, rejected_drafter = 0, rollbacks = 0;
  int64_t mid_batch_swaps = 0;  // drafter swaps between a batch's steps (also in drafter_swaps)
  int64_t rollback_confirmations = 0;  // live alarms checked on the same completions (rolled back or not)
  int64_t completions_unrecorded = 0;  // serving completions left out by record_rate
  int64_t record_chunks = 0;           // records beyond one per completion (record_max_tokens)
  // Adaptive speculation: predicted tokens/s at the full settings and plain (0: not measured yet),
  // and serving batches by the depth of their non-probe requests ([0]: plain).
  double spec_tps_estimate = 0, plain_tps_estimate = 0;
  std::vector<int64_t> adaptive_depth_batches;
  int64_t adaptive_plain_batches = 0;  // = adaptive_depth_batches[0]
};

class Worker {
 public:
  // The initial versions are trusted (loaded by the caller); sender may be null (no records).
  Worker(WorkerOptions options, std::shared_ptr<const PolicyModel> policy, uint64_t policy_version,
         std::shared_ptr<const DraftModel> drafter, uint64_t drafter_version,
         std::shared_ptr<messaging::RecordSender> sender);

  // why (optional): the reason of a rejection.
  bool offer_policy(const std::string& version_dir, std::string* why = nullptr);
  bool offer_drafter(const std::string& version_dir, std::string* why = nullptr);
  // Swaps the staged versions in now. Call it between batches from the thread that calls
  // generate() (a serving daemon applies an offer while idle instead of at its next batch).
  void apply_staged();
  // A fixed drafter for kReference batches (rebound to each new policy like the serving one).
  void set_reference_drafter(std::shared_ptr<const DraftModel> drafter, uint64_t version);

  BatchReport generate(const std::vector<GenRequest>& requests, GenMode mode);
  // Submits the records of a batch this worker generated. Completions the engine did not
  // capture need a forward of the policy they were generated with, which must still be the
  // serving one (Error otherwise, and without a sender). Returns the records queued.
  int64_t stream_records(const BatchReport& batch);

  uint64_t policy_version() const;
  uint64_t drafter_version() const;
  WorkerMetrics metrics() const;

 private:
  struct Drafter {
    std::shared_ptr<const DraftModel> model;
    uint64_t version = 0;
  };
  struct Run {
    std::map<uint64_t, GenResult> done;         // by request index
    std::map<uint64_t, uint64_t> drafter_of;    // by request index: drafter serving when it finished
    int64_t tokens = 0;
    double seconds = 0;  // the engine's steps only, not building the engine
    bool swapped = false;  // a staged drafter was swapped in during this run
    SpecStats spec;        // the rounds after the swap (all of them without one)
    SpecStats spec_before;  // the rounds before it
  };
  // One engine run over requests[indices] at chain depth `depth` (0: plain; full_depth(): the
  // engine's settings), capture as for the batch's mode. With may_swap, a staged drafter is
  // swapped in between steps (`drafter` becomes it).
  Run run_engine(const PolicyModel& policy, Drafter& drafter, bool may_swap, const std::vector<GenRequest>& requests,
                 const std::vector<size_t>& indices, int64_t depth, bool capture, int64_t* finished);
  bool swap_in_staged(Engine& engine, Drafter& drafter);  // worker thread, between steps
  void install_drafter(Drafter d);                        // mu_ held: d becomes the serving drafter
  int64_t full_depth() const { return options_.engine.spec.steps; }
  void adaptive_update(int64_t depth, const Run& run);
  void watch_acceptance(const BatchReport& rep);  // worker thread, after a serving batch

  WorkerOptions options_;
  std::shared_ptr<messaging::RecordSender> sender_;
  mutable std::mutex mu_;
  std::shared_ptr<const PolicyModel> policy_;
  uint64_t policy_version_ = 0;
  Drafter serving_, reference_, previous_;  // previous_: kept until the new one is confirmed
  std::shared_ptr<const PolicyModel> staged_policy_;
  uint64_t staged_policy_version_ = 0;
  Drafter staged_drafter_;
  std::set<uint64_t> banned_drafters_;
  SpecStats watch_new_, last_of_previous_;  // acceptance since the swap; previous drafter's recent
  bool watching_ = false;
  WorkerMetrics metrics_;
  AdaptiveSpec adaptive_;         // worker thread
  uint64_t adaptive_order_ = 0;  // which of the probe and the rest runs first (alternates)
  uint64_t completions_seen_ = 0;  // serving completions so far (record_rate; worker thread)
};

}  // namespace updraft
