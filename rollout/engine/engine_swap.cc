// Engine::set_drafter and set_policy: replacing models between steps (rollout/engine/engine.h).
#include <algorithm>
#include <chrono>

#include "kernels/core/error.h"
#include "rollout/engine/engine.h"
#include "rollout/spec/speculator.h"

namespace updraft {

void Engine::check_fits(const PolicyModel& model, const DraftModel& drafter, const SpecSettings& spec,
                        const std::vector<int64_t>& aux_layers) {
  const PolicyConfig& pc = model.config();
  const DraftConfig& dc = drafter.config();
  UPD_REQUIRE(dc.vocab_size == pc.vocab_size && dc.target_hidden_size == pc.hidden_size &&
              drafter.device() == model.device() && drafter.act_dtype() == model.act_dtype())
      << "engine: the drafter was built for another policy (vocabulary " << dc.vocab_size << " vs " << pc.vocab_size
      << ", hidden size " << dc.target_hidden_size << " vs " << pc.hidden_size << ", or device)";
  model.check_aux_layers(drafter.aux_layers());
  UPD_REQUIRE(drafter.aux_layers() == aux_layers)
      << "engine: the drafter reads other aux layers than the engine captures";
  spec.validate();
  UPD_REQUIRE(spec.top_k <= dc.draft_vocab_size)
      << "engine: speculation top_k " << spec.top_k << " exceeds the draft vocabulary " << dc.draft_vocab_size;
}

void Engine::attach(const DraftModel* d, std::unique_ptr<KvCache> cache) {
  drafter_ = d;
  draft_cache_ = std::move(cache);
  scheduler_.set_caches(&cache_, draft_cache_.get());
  scheduler_.set_limits(limits_of(opts_, d != nullptr));
  if (chooser_ != nullptr)
    chooser_->drafter_changed(++drafter_generation_);
  draws_.drafter_changed();
}

void Engine::set_drafter(const DraftModel* drafter) {
  if (drafter == drafter_)
    return;
  scheduler_.drop_donors();  // their pairs are the old drafter's
  const auto t0 = std::chrono::steady_clock::now();
  const auto& running = scheduler_.running();
  if (drafter == nullptr) {  // plain decoding from the next step
    for (const auto& s : running) {
      s->spec = false;
      s->dkv = SeqKv();
      s->drop_pending();
      s->tree = DraftTree();
    }
    attach(nullptr, nullptr);
    ++stats_.drafter_swaps;
    return;
  }
  check_fits(*model_, *drafter, opts_.spec, aux_layers_);
  // With nothing running the old draft cache can serve the new drafter as it is.
  std::unique_ptr<KvCache> cache;
  const KvCacheShape want = drafter->kv_shape();
  const bool reuse = running.empty() && draft_cache_ != nullptr && draft_cache_->shape().layers == want.layers &&
                     draft_cache_->shape().kv_heads == want.kv_heads && draft_cache_->shape().head_dim == want.head_dim &&
                     draft_cache_->shape().dtype == want.dtype && draft_cache_->shape().device == want.device;
  cache = reuse ? std::move(draft_cache_) : make_draft_cache(*drafter);
  // Everything that can fail happens before the sequences change: the reservations in the new
  // cache and the recomputed pairs.
  std::vector<SeqKv> dkv(running.size());
  std::vector<bool> spec(running.size(), false);
  int64_t longest = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    const Seq& s = *running[i];
    if (!Scheduler::may_speculate(s, *cache, opts_.spec.scratch_entries()))
      continue;
    UPD_REQUIRE(cache->reserve(dkv[i], s.kv.length + opts_.spec.scratch_entries()))
        << "engine: the new drafter's cache cannot hold the sequences in flight";
    spec[i] = true;
    longest = std::max(longest, s.kv.length);
  }
  std::vector<std::vector<Tensor>> old_aux(running.size());
  std::vector<std::vector<int32_t>> old_tok(running.size());
  for (size_t i = 0; i < running.size(); ++i) {
    old_aux[i] = std::move(running[i]->pending_aux);
    old_tok[i] = std::move(running[i]->pending_tokens);
    running[i]->drop_pending();
  }
  try {
    KvCache scratch(model_->kv_shape(), std::max<int64_t>(1, cache_.blocks_needed(longest)), opts_.block_size);
    for (size_t i = 0; i < running.size(); ++i)
      if (spec[i])
        recompute_pairs(*model_, *running[i], scratch, aux_layers_, opts_.prefill_chunk);
  } catch (...) {  // the old drafter and its caches serve on
    for (size_t i = 0; i < running.size(); ++i) {
      running[i]->pending_aux = std::move(old_aux[i]);
      running[i]->pending_tokens = std::move(old_tok[i]);
    }
    if (reuse)
      draft_cache_ = std::move(cache);
    throw;
  }
  for (size_t i = 0; i < running.size(); ++i) {
    Seq& s = *running[i];
    s.spec = spec[i];
    s.dkv = dkv[i];
    s.tree = DraftTree();
  }
  const bool had = drafter_ != nullptr;
  attach(drafter, std::move(cache));
  if (had || !running.empty()) {
    ++stats_.drafter_swaps;
    stats_.swap_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

void Engine::set_policy(const PolicyModel& model, const DraftModel* drafter) {
  UPD_REQUIRE(scheduler_.running().empty()) << "engine: a policy swaps only while no sequence is running";
  const KvCacheShape a = model.kv_shape(), b = model_->kv_shape();
  UPD_REQUIRE(a.layers == b.layers && a.kv_heads == b.kv_heads && a.head_dim == b.head_dim && a.dtype == b.dtype &&
              a.device == b.device && model.config().vocab_size == model_->config().vocab_size)
      << "engine: the new policy has another shape than the one the engine was built for";
  if (drafter != nullptr)
    check_fits(model, *drafter, opts_.spec, aux_layers_);
  scheduler_.drop_donors();  // their entries are the old policy's
  model_ = &model;
  suffix_.policy_changed();
  set_drafter(drafter);
}

}  // namespace updraft
