#include "rollout/engine/scheduler.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "kernels/core/error.h"
#include "rollout/engine/prefix_reuse.h"

namespace updraft {

Scheduler::Scheduler(const SchedulerLimits& limits) : limits_(limits) {
  UPD_REQUIRE(limits.max_batch > 0 && limits.prefill_chunk > 0 && limits.tree_rows >= 1 && limits.draft_scratch >= 0 &&
              limits.suffix_rows >= 0)
      << "scheduler: max_batch and prefill_chunk must be positive";
}

void Scheduler::set_caches(KvCache* cache, KvCache* draft_cache) {
  UPD_CHECK(donors_.empty()) << "scheduler: donors must be dropped before the caches change";
  cache_ = cache;
  draft_cache_ = draft_cache;
}

void Scheduler::add(std::unique_ptr<Seq> s) {
  waiting_.push_back(std::move(s));
}

Seq* Scheduler::find(uint64_t id) const {
  for (const auto& s : running_)
    if (s->id == id)
      return s.get();
  for (const auto& s : waiting_)
    if (s->id == id)
      return s.get();
  return nullptr;
}

bool Scheduler::abort(uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      (*it)->result.finish_reason = "abort";
      done_.push_back(std::move(*it));
      waiting_.erase(it);
      return true;
    }
  for (const auto& s : running_)
    if (s->id == id && !s->finished()) {
      s->abort_requested = true;
      return true;
    }
  return false;
}

void Scheduler::release(Seq& s) {
  cache_->release(s.kv);
  if (draft_cache_ != nullptr && !s.dkv.blocks.empty())
    draft_cache_->release(s.dkv);
  s.dkv = SeqKv();
}

// A decoding sequence needs its step's rows; a prefilling one what its prefill target needs (a
// drafter set while it prefilled has reserved only what it had then).
bool Scheduler::grow(Seq& s, int64_t rows) {
  const int64_t len = s.prefilling() ? s.prefill_target() : s.kv.length;
  while (!cache_->reserve(s.kv, len + rows))
    if (!evict_donor(nullptr))
      return false;
  if (!s.spec || draft_cache_ == nullptr)
    return true;
  while (!draft_cache_->reserve(s.dkv, len + limits_.draft_scratch))
    if (!evict_donor(nullptr))
      return false;
  return true;
}

bool Scheduler::evict_donor(const Seq* spare) {
  if (donors_.empty())
    return false;
  auto it = donors_.begin();
  if (it->get() == spare && donors_.size() > 1)
    ++it;
  release(**it);
  donors_.erase(it);
  return true;
}

int64_t Scheduler::donor_blocks() const {
  std::unordered_map<int32_t, int32_t> held;  // block -> donors holding it
  for (const auto& d : donors_)
    for (const int32_t b : d->kv.blocks)
      ++held[b];
  int64_t only = 0;
  for (const auto& [b, n] : held)
    only += n == cache_->holders(b);
  return only;
}

void Scheduler::drop_donors() {
  while (evict_donor(nullptr)) {
  }
}

// Shares at least kFollowShare context tokens with a running sequence that has not cached them yet.
bool Scheduler::follows_prefill(const Seq& s) const {
  if (!limits_.reuse_prefixes)
    return false;
  const bool spec = draft_cache_ != nullptr && may_speculate(s, *draft_cache_, limits_.draft_scratch);
  for (const auto& r : running_) {
    if (!r->prefilling() || !can_take_from(s, spec, *r))
      continue;
    // What s could take from r once r has cached its prefill.
    const int64_t take = own_limit(s, common_prefix(s, *r, r->prefill_target()));
    if (take >= kFollowShare && r->kv.length < take)
      return true;
  }
  return false;
}

const Seq* Scheduler::best_donor(const Seq& s, PrefixTake* take) const {
  const Seq* best = nullptr;
  *take = PrefixTake();
  auto consider = [&](const Seq& d) {
    const PrefixTake t = plan_take(s, d);
    if (t.rows > take->rows) {
      *take = t;
      best = &d;
    }
  };
  for (const auto& r : running_)
    consider(*r);
  for (const auto& d : donors_)
    consider(*d);
  return best;
}

void Scheduler::take_from(Seq& s, const Seq& donor, const PrefixTake& take) {
  take_prefix(s, donor, take, *cache_, draft_cache_);
  s.result.cached_tokens = std::min(take.rows, s.prompt_len());  // of its prompt (a recompute takes outputs too)
  reused_ += take.rows;
  for (auto it = donors_.begin(); it != donors_.end(); ++it)
    if (it->get() == &donor) {  // most recently used: given back last
      std::unique_ptr<Seq> d = std::move(*it);
      donors_.erase(it);
      donors_.push_back(std::move(d));
      break;
    }
}

bool Scheduler::may_speculate(const Seq& s, const KvCache& draft_cache, int64_t scratch) {
  const int64_t longest = s.prompt_len() + s.req.params.max_new_tokens + scratch;
  return s.req.speculate && draft_cache.blocks_needed(longest) <= draft_cache.num_blocks();
}

bool Scheduler::admit_one(Seq& s) {
  s.spec = draft_cache_ != nullptr && may_speculate(s, *draft_cache_, limits_.draft_scratch);
  const int64_t len = s.prefill_target() + limits_.rows_of(s);
  const int64_t dlen = s.prefill_target() + limits_.draft_scratch;
  // A watermark of free blocks (1% of the pool) keeps room for running sequences to grow, so a
  // new admission does not cause an immediate preemption; a lone sequence needs none. Blocks it
  // would share with its donor cost nothing.
  auto fits = [&](const KvCache& c, int64_t length, int64_t shared) {
    const int64_t watermark = running_.empty() ? 0 : std::max<int64_t>(1, c.num_blocks() / 100);
    return c.free_blocks() - (c.blocks_needed(length) - shared) >= watermark;
  };
  PrefixTake take;
  const Seq* donor = limits_.reuse_prefixes ? best_donor(s, &take) : nullptr;
  // Donors are given back for room, the one this sequence would take its prefix from last.
  while (!fits(*cache_, len, donor ? cache_->shared_blocks(take.rows) : 0) ||
         (s.spec && !fits(*draft_cache_, dlen, donor ? draft_cache_->shared_blocks(take.draft_rows) : 0))) {
    if (!evict_donor(donor))
      return false;
    donor = limits_.reuse_prefixes ? best_donor(s, &take) : nullptr;  // it may have gone last
  }
  s.result.cached_tokens = 0;  // what this admission takes (a recompute after a preemption too)
  if (donor != nullptr)
    take_from(s, *donor, take);
  UPD_CHECK(cache_->reserve(s.kv, len)) << "scheduler: reservation failed after the free-block check";
  if (s.spec)
    UPD_CHECK(draft_cache_->reserve(s.dkv, dlen)) << "scheduler: draft reservation failed after the check";
  return true;
}

void Scheduler::preempt(size_t index) {
  std::unique_ptr<Seq> s = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  recomputed_ += s->kv.length;
  release(*s);
  s->drop_pending();
  s->tree = DraftTree();
  ++s->result.preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(s));
}

void Scheduler::remove_aborted() {
  for (size_t i = 0; i < running_.size();) {
    if (!running_[i]->abort_requested) {
      ++i;
      continue;
    }
    release(*running_[i]);
    running_[i]->result.finish_reason = "abort";
    done_.push_back(std::move(running_[i]));
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

int64_t Scheduler::retract_all() {
  const auto n = static_cast<int64_t>(running_.size());
  while (!running_.empty())
    preempt(running_.size() - 1);
  return n;
}

StepPlan Scheduler::schedule(bool admit, int64_t step_index) {
  UPD_CHECK(cache_ != nullptr) << "scheduler: no KV cache set";
  remove_aborted();
  // Running sequences grow by this step's rows, oldest first; the youngest give way.
  for (size_t i = 0; i < running_.size(); ++i) {
    const int64_t rows = limits_.rows_of(*running_[i]);
    while (!grow(*running_[i], rows)) {
      const size_t victim = running_.size() - 1;
      UPD_CHECK(victim > 0) << "scheduler: a lone sequence cannot grow (submit admits only requests that fit)";
      preempt(victim);
      if (victim == i)
        break;
    }
  }
  int64_t held = 0;
  for (size_t w = 0; admit && w < waiting_.size() && static_cast<int64_t>(running_.size()) < limits_.max_batch;) {
    Seq& s = *waiting_[w];
    if (follows_prefill(s)) {
      if (++held >= limits_.max_batch)
        break;  // a flood of siblings: the rest wait their turn anyway
      ++w;      // admitted once its leader's prefill is cached
      continue;
    }
    if (!admit_one(s))
      break;  // first come, first served: wait for blocks to free up
    if (s.result.admitted_step < 0)
      s.result.admitted_step = step_index;
    running_.push_back(std::move(waiting_[w]));
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
  }
  StepPlan plan;
  int64_t budget = limits_.prefill_chunk;
  for (const auto& sp : running_) {
    Seq& s = *sp;
    if (!s.prefilling()) {
      plan.entries.push_back({&s, 0});
      ++plan.decoding;
      continue;
    }
    const int64_t n = std::min(s.prefill_target() - s.kv.length, budget);
    if (n <= 0)
      continue;
    budget -= n;
    plan.prefill_tokens += n;
    plan.entries.push_back({&s, n});
  }
  return plan;
}

bool Scheduler::keeps_as_donor(const Seq& s) const {
  return limits_.reuse_prefixes && limits_.kept_donors > 0 && s.result.finish_reason != "abort" && s.kv.length > 0;
}

std::vector<std::unique_ptr<Seq>> Scheduler::collect_finished() {
  for (size_t i = 0; i < running_.size();) {
    if (!running_[i]->finished()) {
      ++i;
      continue;
    }
    Seq& s = *running_[i];
    if (keeps_as_donor(s)) {
      donors_.push_back(keep_as_donor(s, *cache_, s.spec ? draft_cache_ : nullptr));
      while (static_cast<int64_t>(donors_.size()) > limits_.kept_donors)
        evict_donor(nullptr);
    }
    release(s);
    done_.push_back(std::move(running_[i]));
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return std::exchange(done_, {});
}

}  // namespace updraft
