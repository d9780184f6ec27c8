// The engine's scheduler: which sequences run in the next step and what each one feeds.
//
// Queues. submit() appends to the waiting queue (first come, first served). schedule() admits
// waiting sequences in order while the batch has room (max_batch) and the KV caches have the
// blocks for the whole prefill target plus one step of decoding, keeping a watermark of free
// blocks so that running sequences can grow; the first one that does not fit stops admission
// (nothing overtakes it). A sequence admitted reserves only what it needs so far: every step,
// each decoding sequence grows its reservation by that step's rows (its tree, or one token), and
// speculating ones their draft cache by the pairs and draft scratch of the step.
//
// Preemption by recompute. When a running sequence cannot grow, the youngest running sequence
// (latest admitted) is preempted: its blocks are released, its pending drafter pairs dropped,
// and it goes back to the front of the waiting queue with the tokens it has emitted. When it is
// admitted again it prefills prompt + all but its last output token (recompute) and continues
// from its pending token; sampling is counter-based (seed, output index), so its tokens are what
// they would have been. The oldest running sequence is never preempted by a younger one, so it
// always progresses, and a request that fits the whole cache alone (checked at submit) finishes.
//
// Budget. Decoding sequences run every step; prompt and recompute tokens fill at most
// prefill_chunk tokens per step, in running order (a long prompt is prefilled over several
// steps beside the decoding ones).
//
// Prefix reuse (with SchedulerLimits::reuse_prefixes; rollout/engine/prefix_reuse.h). An admitted
// sequence takes over the longest cached prefix of its context from a running sequence or a kept
// donor (a finished sequence's caches, kept_donors at most, least recently used given back
// first, and all of them before a running sequence is preempted or an admission waits for
// blocks). The one exception to first come, first served: a waiting sequence that shares at
// least kFollowShare context tokens with a running one still prefilling them is held back (those
// behind it may be admitted) until that prefill is done, so that n siblings submitted together
// prefill their prompt once.
//
// Aborts. abort(id) on a waiting sequence removes it at once; on a running one it leaves at the
// next schedule(), its blocks released. Either way it comes back from collect_finished() with
// finish reason "abort" and the tokens it had.
//
// Not thread-safe: the engine's thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "rollout/engine/prefix_reuse.h"
#include "rollout/engine/sequence.h"

namespace updraft {

struct SchedulerLimits {
  int64_t max_batch = 64;
  int64_t prefill_chunk = 512;
  int64_t tree_rows = 1;        // rows of the largest tree a speculating sequence verifies
  int64_t draft_scratch = 0;    // draft cache entries a proposal appends temporarily
  int64_t suffix_rows = 0;      // suffix drafts a round may graft (rollout/spec/suffix_drafts.h)
  bool reuse_prefixes = false;  // prefix reuse (above)
  int64_t kept_donors = 0;      // finished sequences kept as donors at most
  // Rows a decoding sequence's step may verify: its tree (drafter and suffix drafts) or one token.
  int64_t rows_of(const Seq& s) const {
    return (s.spec ? tree_rows : 1) + (s.req.speculate && !s.req.probe ? suffix_rows : 0);
  }
};

struct StepEntry {
  Seq* seq = nullptr;
  int64_t prefill = 0;  // prompt or recompute tokens fed this step; 0: decodes (pending token or tree)
};

struct StepPlan {
  std::vector<StepEntry> entries;  // in running order
  int64_t decoding = 0, prefill_tokens = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerLimits& limits);

  // The caches sequences reserve from; draft_cache may be null (no drafter). REQUIRES: no
  // sequence holds blocks in a cache that is replaced (the engine rebuilds or releases first),
  // and no donor is kept (drop_donors()).
  void set_caches(KvCache* cache, KvCache* draft_cache);
  void set_limits(const SchedulerLimits& limits) { limits_ = limits; }

  void add(std::unique_ptr<Seq> s);
  bool abort(uint64_t id);  // false when no such sequence is waiting or running

  // Aborts leave, admissions (unless `admit` is false), growth with preemption, the step's
  // entries. After it, every entry's sequence has the blocks its step needs.
  StepPlan schedule(bool admit, int64_t step_index);

  // Aborted running sequences leave now (schedule() does it first anyway).
  void remove_aborted();
  // Every running sequence goes back to the waiting queue (in order), its blocks released, to be
  // recomputed when admitted again. Returns how many.
  int64_t retract_all();
  // Finished and aborted sequences, their blocks released, in the order they finished.
  std::vector<std::unique_ptr<Seq>> collect_finished();
  // Whether collect_finished() keeps this finished sequence as a prefix donor.
  bool keeps_as_donor(const Seq& s) const;

  const std::vector<std::unique_ptr<Seq>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Seq>>& waiting() const { return waiting_; }
  Seq* find(uint64_t id) const;
  // A sequence speculates when it asks to and its longest length (with `scratch` proposal entries)
  // fits the whole draft cache; one that does not decodes plainly.
  static bool may_speculate(const Seq& s, const KvCache& draft_cache, int64_t scratch);
  int64_t preemptions() const { return preemptions_; }
  int64_t recomputed_tokens() const { return recomputed_; }
  // Prefix reuse: kept donors, and the context tokens admitted sequences took over so far.
  int64_t donors() const { return static_cast<int64_t>(donors_.size()); }
  // Policy-cache blocks only donors hold: free once they are given back, as they are on demand.
  int64_t donor_blocks() const;
  int64_t reused_tokens() const { return reused_; }
  void drop_donors();  // their blocks go back (the policy or the drafter changed)
  static constexpr int64_t kFollowShare = 16;

 private:
  bool admit_one(Seq& s);
  bool grow(Seq& s, int64_t rows);
  void preempt(size_t index);
  void release(Seq& s);
  // Gives back the least recently used donor other than `spare` (`spare` itself when it is the
  // only one); false when none is kept.
  bool evict_donor(const Seq* spare);
  bool follows_prefill(const Seq& s) const;
  const Seq* best_donor(const Seq& s, PrefixTake* take) const;  // null: none has a prefix to give
  void take_from(Seq& s, const Seq& donor, const PrefixTake& take);

  SchedulerLimits limits_;
  KvCache* cache_ = nullptr;
  KvCache* draft_cache_ = nullptr;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;  // admission order: oldest first
  std::vector<std::unique_ptr<Seq>> done_;
  std::deque<std::unique_ptr<Seq>> donors_;  // least recently used first
  int64_t preemptions_ = 0, recomputed_ = 0, reused_ = 0;
};

}  // namespace updraft
