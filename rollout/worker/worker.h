// A rollout worker: one long-lived engine thread that generates completions with the serving
// policy and drafter versions, streams the drafter's training records to the buffer, and
// hot-swaps new versions of either model (design.md §3, §5).
//
// Requests. submit() (any thread) validates a request and hands it to the engine thread, which
// puts it into the engine at its next step; requests from any number of callers are batched
// continuously by one engine (rollout/engine/engine.h) and each finishes on its own: its
// completion callback runs on the engine thread (keep it short), and GenRequest::on_tokens
// streams its tokens as they are accepted. abort() ends a request at the next step (its KV
// freed; completion with finish reason "abort"). generate() submits a batch and waits for it.
//
// Modes. kServing: the serving drafter (or none), adaptive speculation, records. kReference: a
// fixed reference drafter at the full settings (a frozen copy to compare against). kPlain: plain
// decoding. kFull: the serving drafter at the full settings every step (its acceptance is
// comparable with the reference drafter's: adaptive depths change where rounds start). Each mode
// has its own engine (created on first use); the comparison modes exist for benchmarks and the
// demo.
//
// Plain serving is first-class: a worker without a drafter (or with `speculate` off) decodes
// plainly and still captures records; a drafter offered later (weight link, disk update) is
// taken between steps, requests in flight included.
//
// Hot-swap (rollout/worker/versions.h validates and stages): a drafter is swapped in between
// two engine steps (Engine::set_drafter rebuilds the pairs of the sequences in flight); a policy
// once no sequence is running: admission pauses while the running ones finish (a completion
// comes from one policy version), then the policy and every drafter rebound to it go in. A
// version staged before a request is submitted serves that request. Every completion carries the
// policy and drafter versions it was generated with (the drafter serving when it finished);
// metrics attribute each step's tokens, time and rounds to the versions serving in that step.
// After a drafter swap, rollout/worker/rollback.h decides whether it stays.
//
// Adaptive speculation (options.adaptive): rollout/spec/adaptive.h chooses every step's depth for
// the live batch; its model is in metrics().adaptive.
//
// Records (serving mode, with a sender): rollout/worker/recorder.h; capture happens in the engine
// while generating (no extra pass).
//
// stop() (and the destructor): new submissions are refused, requests not yet running complete
// with error "shutting down", running ones finish, then the engine thread exits.
// Thread safety: every public method is safe from any thread, except that callbacks run on the
// engine thread and must not call stop() or generate() there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "messaging/record_sender.h"
#include "rollout/engine/engine.h"
#include "rollout/spec/adaptive.h"
#include "rollout/worker/confirmation.h"
#include "rollout/worker/recorder.h"
#include "rollout/worker/rollback.h"
#include "rollout/worker/versions.h"

namespace updraft {

enum class GenMode { kServing, kReference, kPlain, kFull };
constexpr int kGenModes = 4;
const char* gen_mode_name(GenMode m);

// How a request ended. kAborted: abort() or a pause in abort mode (answered with what it had);
// kShuttingDown: the worker stopped before it ran; kFailed: the engine failed (error says why).
enum class CompletionStatus { kOk, kAborted, kShuttingDown, kFailed };

struct Completion {
  GenResult result;
  uint64_t policy_version = 0, drafter_version = 0;  // drafter 0: none (plain decoding)
  GenMode mode = GenMode::kServing;
  CompletionStatus status = CompletionStatus::kOk;
  bool record = false;  // the worker made records of it
  bool probe = false;   // it speculated at the full settings every step (WorkerOptions::probe_every)
  std::string error;    // kShuttingDown, kFailed: why
};
using CompletionCallback = std::function<void(Completion)>;

struct SubmitOptions {
  GenMode mode = GenMode::kServing;
  // The server's own traffic (a health check): never recorded or made a probe, and not counted
  // in the serving completions of metrics() or the windows (its tokens are in the step totals).
  bool internal = false;
};

// Requests submitted together (Worker::submit_all); their completions in submission order.
class Submission {
 public:
  explicit Submission(size_t n) : out_(n), left_(n) {}
  const std::vector<uint64_t>& ids() const { return ids_; }
  void wait();
  bool wait_for(std::chrono::milliseconds timeout);  // true when every request completed
  std::vector<Completion> take();                     // after wait(): moves the completions out

 private:
  friend class Worker;
  void complete(size_t i, Completion c);
  std::vector<uint64_t> ids_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Completion> out_;
  size_t left_;
};

struct AdaptiveSpecOptions {
  bool enabled = false;
  AdaptiveOptions model;
};

// One point of the drift dashboard: a window of serving steps (at least window_seconds of engine
// time, or until the engine goes idle or a version changes).
struct WindowReport {
  double t = 0;        // seconds since the worker started, at the window's end
  double seconds = 0;  // engine time in the window
  int64_t steps = 0, tokens = 0, completions = 0;
  uint64_t policy_version = 0, drafter_version = 0;
  SpecStats spec, probe_spec;  // every round; the probe requests' (full settings, comparable)
  SpecStats drafter_spec;      // the drafter's part of every round (EngineStats::drafter_spec)
  double mean_depth = 0, mean_batch = 0;  // per step with decoding sequences
  bool policy_swapped = false, drafter_swapped = false;  // at the window's start
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
};

struct WorkerOptions {
  uint32_t id = 0;
  EngineOptions engine;
  bool speculate = true;  // false: never take a drafter (plain serving)
  AdaptiveSpecOptions adaptive;
  // Every probe_every-th serving request is a probe (GenRequest::probe): it speculates at the full
  // settings whatever depth adaptive speculation picks, so its acceptance compares drafters
  // fairly (the rollback watch, live τ on the dashboard, the demo). 0: no probes. A probe costs
  // what full-depth speculation costs over what the chosen depth would: nothing when speculation
  // pays, up to 1/probe_every of the throughput at batch 1 when it does not, and far more at a
  // large batch, where the probes' trees are verified beside plain rows. Off by default: the
  // rollback watch confirms its alarms on the same completions instead.
  int64_t probe_every = 0;
  double record_rate = 1.0;
  int64_t record_max_tokens = 0;
  double rollback_margin = 0.2;
  int64_t rollback_rounds = 64;
  DrafterScorer scorer;  // confirms a rollback alarm on the same completions (optional)
  // A confirmation runs beside the engine (rollout/worker/confirmation.h) while the new drafter
  // serves; once it has run this long the engine thread waits for its verdict.
  double rollback_wait_seconds = 10;
  int threads = 0;       // OpenMP threads of the engine thread (0: the process default)
  double window_seconds = 1.0;
  std::function<void(const WindowReport&)> on_window;  // engine thread
};

struct BatchReport {
  GenMode mode = GenMode::kServing;
  std::vector<Completion> completions;  // in request order
  uint64_t policy_version = 0, drafter_version = 0;  // drafter: serving when the last one finished
  SpecStats spec;                // the completions' rounds
  SpecStats probe_spec;          // the probe completions' rounds (full settings)
  // The live acceptance length: the probes' when there were any (comparable across drafters and
  // loads), else every round's.
  double live_tau() const { return probe_spec.rounds > 0 ? probe_spec.tau() : spec.tau(); }
  int64_t generated_tokens = 0;
  double generate_seconds = 0;   // wall time from the first submission to the last completion
  int64_t speculated = 0;        // completions with at least one speculation round
  double mean_depth = 0;         // mean speculation depth per decoding step of the completions
  double tokens_per_second() const { return generate_seconds > 0 ? generated_tokens / generate_seconds : 0.0; }
};

struct WorkerMetrics {
  struct Cell {
    SpecStats spec, probe_spec;
    int64_t tokens = 0, completions = 0;
    double seconds = 0;
  };
  std::map<std::pair<uint64_t, uint64_t>, Cell> by_version;  // (policy, drafter) -> serving totals
  int64_t policy_swaps = 0, drafter_swaps = 0, rejected_policy = 0, rejected_drafter = 0, rollbacks = 0;
  int64_t mid_batch_swaps = 0;         // drafter swaps with sequences in flight (also in drafter_swaps)
  int64_t rollback_confirmations = 0;  // rollback alarms checked on the same completions
  RecorderStats records;
  // The serving engine.
  int64_t steps = 0, preemptions = 0, aborted = 0, running = 0, waiting = 0;
  int64_t canary_steps = 0;  // steps that measured a new drafter with a canary (DepthChooser::canary)
  int64_t prefill_tokens = 0, cached_prompt_tokens = 0;  // context tokens prefilled, and taken by prefix reuse
  std::vector<int64_t> depth_steps;  // [d]: steps that ran at depth d
  bool adaptive = false;
  AdaptiveDepth::Snapshot adaptive_model;
  bool suffix_gate = false;  // the serving engine's suffix drafts are gated (rollout/spec/suffix_gate.h)
  SuffixGate::Snapshot suffix_gate_model;
  DrawChooser::Snapshot draws;  // whether sampling chains draw their drafts (rollout/spec/draft_sampling.h)
};

class Worker {
 public:
  // The initial versions are trusted (loaded by the caller); drafter and sender may be null.
  Worker(WorkerOptions options, std::shared_ptr<const PolicyModel> policy, uint64_t policy_version,
         std::shared_ptr<const DraftModel> drafter, uint64_t drafter_version,
         std::shared_ptr<messaging::RecordSender> sender);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Throws Error for a bad request (Engine::validate, or larger than the whole KV cache) or
  // while stopping. Returns the request's id (for abort(), valid from the moment it returns).
  uint64_t submit(GenRequest req, CompletionCallback on_done, SubmitOptions opts = {});
  // Checks every request, then submits them all at once (an idle engine starts them in the same
  // step); Error (nothing submitted) if one is bad or the worker is stopping.
  std::shared_ptr<Submission> submit_all(std::vector<GenRequest> reqs, SubmitOptions opts = {});
  // The checks submit() makes (Error naming the problem), for callers that validate a batch first.
  void check(const GenRequest& req, GenMode mode = GenMode::kServing) const;
  bool abort(uint64_t id);  // false when the request is unknown or already finished
  // Submits every request and waits for all; Error if one fails in the worker.
  BatchReport generate(const std::vector<GenRequest>& requests, GenMode mode);

  // Versions::offer_policy / offer_drafter (a published version, or a plain Hugging Face /
  // EAGLE directory with an explicit or the next version), then wakes the engine thread.
  bool offer_policy(const std::string& dir, std::string* why = nullptr, uint64_t version = 0,
                    WeightVersion* accepted = nullptr);
  bool offer_drafter(const std::string& dir, std::string* why = nullptr, uint64_t version = 0,
                     WeightVersion* accepted = nullptr);
  void set_reference_drafter(std::shared_ptr<const DraftModel> drafter, uint64_t version);
  // Waits until the serving policy (or drafter) version is at least `version`; false on timeout
  // or stop.
  bool wait_serving(bool drafter, uint64_t version, std::chrono::milliseconds timeout);
  // Waits until the rollback watch of the serving drafter has decided (its confirmation included,
  // when it takes one); true at once when no watch has collected its rounds (none, or still
  // collecting).
  bool wait_rollback_verdict(std::chrono::milliseconds timeout);

  // Stepping stops until resume(); returns once no step is running and the mode has taken
  // effect. kInPlace: requests keep their KV; kAbort: every request in flight ends now (finish
  // reason "abort", answered with what it had); kRetract: running requests free their KV and
  // are recomputed after resume().
  enum class PauseMode { kInPlace, kAbort, kRetract };
  void pause(PauseMode mode = PauseMode::kInPlace);
  void resume();
  struct FlushResult {
    bool ok = false;
    std::string message;
  };
  // With no request in flight: frees the comparison engines' KV caches and checks that every
  // block of the serving engine is free. Refused while requests are in flight.
  FlushResult flush_cache();
  void stop();

  struct Load {
    int64_t running = 0, waiting = 0, queued = 0;  // queued: submitted, not yet in an engine
    int64_t free_blocks = 0, total_blocks = 0, block_size = 0;
  };
  Load load() const;
  uint64_t policy_version() const;
  uint64_t drafter_version() const;
  WorkerMetrics metrics() const;

 private:
  struct Inbox {
    uint64_t id;
    SubmitOptions opts;
    GenRequest req;
    CompletionCallback on_done;
  };
  struct Ticket {
    uint64_t id = 0;
    CompletionCallback on_done;
    bool record = false, probe = false, internal = false;
    bool shutting_down = false;  // aborted because the worker stops
  };
  struct ModeEngine {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<AdaptiveDepth> chooser;
    std::shared_ptr<const PolicyModel> policy;  // what the engine points at, kept alive
    uint64_t policy_version = 0;
    DrafterVersion drafter;
    std::map<uint64_t, Ticket> tickets;  // by engine request id
  };
  // worker_loop.cc: the engine thread.
  void loop();
  ModeEngine& engine_for(GenMode mode);
  void begin_shutdown();
  void finish_unadmitted(Inbox& x, CompletionStatus status, const std::string& why);
  void admit(std::deque<Inbox>& in);
  void abort_in_engine(uint64_t id);
  void apply_versions();
  void sync_drafter();  // the serving engine takes the drafter versions_ says should serve
  void follow_serving_drafter();  // kFull runs the serving engine's drafter
  DrafterVersion drafter_of(GenMode mode) const;  // what a mode's engine runs
  void step(GenMode mode);
  void account_step(const EngineStats& before, const EngineStats& after);
  void deliver(GenMode mode, GenResult&& g);
  void fail_all(GenMode mode, const std::string& why);
  uint64_t enqueue(GenRequest req, CompletionCallback on_done, const SubmitOptions& opts);  // mu_ held
  void watch_rollback();
  void start_confirmation(const DrafterVersion& previous);
  // Applies a finished confirmation's verdict; waits for it when `now` or past rollback_wait_seconds.
  void collect_confirmation(bool now = false);
  void apply_rollback_verdict(RollbackWatch::Verdict v, const DrafterVersion& previous);
  void close_window();
  void do_flush();
  void pause_action(PauseMode mode);
  void deliver_aborted();
  void publish_state();  // mu_ held
  bool any_work() const;
  bool any_running() const;

  WorkerOptions options_;
  PolicyConfig config_;
  int64_t kv_blocks_ = 0, block_size_ = 16;
  Versions versions_;
  Recorder recorder_;
  RollbackWatch rollback_;
  std::chrono::steady_clock::time_point started_;

  // Engine thread only.
  ModeEngine engines_[kGenModes];
  WindowReport window_;
  int64_t window_depth_steps_ = 0;
  double window_depth_sum_ = 0, window_batch_sum_ = 0;
  bool window_policy_swapped_ = false, window_drafter_swapped_ = false;
  bool drafter_retry_when_idle_ = false, full_retry_when_idle_ = false;
  bool pending_watch_ = false;  // a drafter replaced another one: watch it once it serves
  uint64_t confirming_new_ = 0, confirming_old_ = 0;  // the drafter versions confirmation_ compares
  uint64_t serving_requests_ = 0;  // serving requests admitted (probe_every)
  bool shutting_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;        // the engine thread waits on it
  std::condition_variable state_cv_;  // pause, flush, wait_serving and stop wait on it
  std::deque<Inbox> inbox_;
  std::vector<uint64_t> aborts_;
  // Every request from submission to completion: worker id -> (mode, engine id; 0 until admitted).
  std::map<uint64_t, std::pair<GenMode, uint64_t>> engine_ids_;
  uint64_t next_id_ = 1;
  bool stopping_ = false, stopped_ = false, paused_ = false, in_step_ = false, wake_ = false;
  bool flush_requested_ = false, flush_done_ = false;
  PauseMode pause_mode_ = PauseMode::kInPlace;
  uint64_t pause_requests_ = 0, pause_served_ = 0;
  FlushResult flush_result_;
  WorkerMetrics metrics_;
  Load load_;
  uint64_t serving_policy_version_ = 0, serving_drafter_version_ = 0;  // what the serving engine runs
  // A watch is ready to decide or its confirmation runs (wait_rollback_verdict).
  bool rollback_undecided_ = false;
  std::thread thread_;
  // Engine thread only; last, so that it is joined before the members its callback uses go.
  std::unique_ptr<BackgroundConfirmation> confirmation_;
};

}  // namespace updraft
