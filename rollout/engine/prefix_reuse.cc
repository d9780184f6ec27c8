#include "rollout/engine/prefix_reuse.h"

#include <algorithm>
#include <utility>

#include "kernels/core/error.h"
#include "rollout/spec/speculator.h"

namespace updraft {

int64_t common_prefix(const Seq& s, const Seq& donor, int64_t donor_len) {
  const int64_t n = std::min(s.prefill_target(), donor_len);
  int64_t p = 0;
  while (p < n && s.token_at(p) == donor.token_at(p))
    ++p;
  return p;
}

int64_t own_limit(const Seq& s, int64_t common) {
  int64_t m = std::min(common, s.prefill_target() - 1);
  if (s.req.input_logprobs_from >= 0)  // the logprob of position p needs row p - 1's logits
    m = std::min(m, std::max<int64_t>(1, s.req.input_logprobs_from) - 1);
  return std::max<int64_t>(0, m);
}

bool can_take_from(const Seq& s, bool s_spec, const Seq& donor) {
  // No captured rows, or no pairs, to take: prefilling the prompt gives them.
  return (!s.req.capture || donor.req.capture) && (!s_spec || donor.spec);
}

PrefixTake plan_take(const Seq& s, const Seq& donor) {
  if (!can_take_from(s, s.spec, donor))
    return {};
  const int64_t common = common_prefix(s, donor, donor.prompt_len() + donor.out_len());
  int64_t m = std::min(own_limit(s, common), donor.kv.length);
  if (s.req.capture)
    m = std::min(m, donor.cap_rows);
  if (m <= 0)
    return {};
  if (!s.spec)
    return {m, 0};
  const int64_t d = std::min({donor.dkv.length, m, common - 1});
  if (d < donor.dkv.length)
    return {d, d};  // the pairs past d are in the donor's draft cache only
  return {std::min(m, donor.dkv.length + donor.pending()), d};
}

void take_prefix(Seq& s, const Seq& donor, const PrefixTake& t, KvCache& cache, KvCache* draft_cache) {
  UPD_CHECK(s.kv.length == 0 && s.pending() == 0 && t.draft_rows <= t.rows)
      << "prefix reuse: sequence " << s.id << " already holds entries";
  if (t.rows <= 0)
    return;
  UPD_CHECK(s.kv.blocks.empty() && s.dkv.blocks.empty()) << "prefix reuse: sequence " << s.id << " holds blocks";
  UPD_CHECK(cache.share_prefix(donor.kv, s.kv, t.rows)) << "prefix reuse: no block for the partial block's copy";
  if (s.req.capture) {
    if (donor.kept_cap_aux.defined()) {  // rounded as the records round them: the records are the same
      s.cap_aux = donor.kept_cap_aux.rows(0, t.rows).to_f32_vector();
    } else {
      const auto width = donor.cap_aux.size() / static_cast<size_t>(std::max<int64_t>(1, donor.cap_rows));
      s.cap_aux.assign(donor.cap_aux.begin(), donor.cap_aux.begin() + static_cast<std::ptrdiff_t>(width * t.rows));
    }
    s.cap_rows = t.rows;
  }
  if (!s.spec)
    return;
  UPD_CHECK(draft_cache != nullptr) << "prefix reuse: a speculating sequence without a draft cache";
  UPD_CHECK(draft_cache->share_prefix(donor.dkv, s.dkv, t.draft_rows))
      << "prefix reuse: no draft block for the partial block's copy";
  // Pairs [draft_rows, rows): the donor's pending aux rows, this sequence's own next tokens.
  int64_t p = donor.dkv.length;
  for (const Tensor& chunk : donor.pending_aux) {
    const int64_t lo = std::max(p, t.draft_rows), hi = std::min(p + chunk.size(0), t.rows);
    if (lo < hi)
      s.pending_aux.push_back(chunk.rows(lo - p, hi - p));
    p += chunk.size(0);
  }
  for (int64_t q = t.draft_rows; q < t.rows; ++q)
    s.pending_tokens.push_back(s.token_at(q + 1));
  UPD_CHECK(s.dkv.length + s.pending() == s.kv.length)
      << "prefix reuse: " << s.dkv.length << " + " << s.pending() << " pairs for " << s.kv.length << " entries";
}

std::unique_ptr<Seq> keep_as_donor(Seq& finished, KvCache& cache, KvCache* draft_cache) {
  auto d = std::make_unique<Seq>();
  d->id = finished.id;
  d->req.prompt = finished.req.prompt;
  d->req.capture = finished.req.capture;
  d->result.tokens = finished.result.tokens;
  d->spec = finished.spec;
  d->kv = std::exchange(finished.kv, SeqKv());
  cache.shrink(d->kv);
  if (finished.spec && draft_cache != nullptr) {
    d->dkv = std::exchange(finished.dkv, SeqKv());
    draft_cache->shrink(d->dkv);
    if (finished.pending() > 0) {  // its own copy: views would keep whole steps' aux rows alive
      const Tensor& first = finished.pending_aux.front();
      Tensor own = Tensor::empty({finished.pending(), first.numel() / first.size(0)}, first.dtype(), first.device());
      copy_pending(finished, own, 0);
      d->pending_aux = {own};
      d->pending_tokens = finished.pending_tokens;
    }
  }
  if (finished.req.capture) {  // rounded to bf16, as the records hold them (see take_prefix)
    const int64_t width = static_cast<int64_t>(finished.cap_aux.size()) / std::max<int64_t>(1, finished.cap_rows);
    d->kept_cap_aux = Tensor::from_f32(finished.cap_aux, {finished.cap_rows, width}).to_dtype(DType::BF16);
    d->cap_rows = finished.cap_rows;
  }
  return d;
}

}  // namespace updraft
