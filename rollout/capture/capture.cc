#include "rollout/capture/capture.h"

#include <algorithm>

#include "kernels/core/error.h"
#include "kernels/ops.h"

namespace updraft {

std::vector<TttSample> capture_samples(const PolicyModel& policy, const std::vector<Rollout>& rollouts,
                                       const CaptureOptions& opts, uint64_t policy_version) {
  const PolicyConfig& cfg = policy.config();
  const std::vector<int64_t> aux_layers = opts.aux_layers.empty() ? cfg.default_aux_layers() : opts.aux_layers;
  policy.check_aux_layers(aux_layers);
  const int64_t V = cfg.vocab_size, A = static_cast<int64_t>(aux_layers.size()), H = cfg.hidden_size;
  const int64_t k = std::min<int64_t>(opts.teacher_k, V);
  UPD_REQUIRE(k >= 1) << "capture: teacher_k must be at least 1";
  const int64_t block = 16;
  std::vector<TttSample> out;
  out.reserve(rollouts.size());
  size_t at = 0;
  while (at < rollouts.size()) {
    // A batch of whole sequences up to batch_tokens (at least one).
    size_t end = at;
    int64_t tokens = 0, blocks = 0;
    while (end < rollouts.size()) {
      const int64_t n = static_cast<int64_t>(rollouts[end].prompt.size() + rollouts[end].response.size());
      if (end > at && tokens + n > opts.batch_tokens)
        break;
      tokens += n;
      blocks += (n + block - 1) / block;
      ++end;
    }
    KvCache cache(policy.kv_shape(), blocks, block);
    std::vector<SeqKv> kvs(end - at);
    std::vector<SeqStep> steps(end - at);
    for (size_t i = at; i < end; ++i) {
      const Rollout& r = rollouts[i];
      UPD_REQUIRE(!r.prompt.empty() && !r.response.empty())
          << "capture: rollout " << i << " has an empty prompt or response";
      SeqStep& st = steps[i - at];
      st.kv = &kvs[i - at];
      st.tokens = r.prompt;
      st.tokens.insert(st.tokens.end(), r.response.begin(), r.response.end());
      UPD_CHECK(cache.reserve(kvs[i - at], static_cast<int64_t>(st.tokens.size())));
      // The distribution of response token j is the logits row at position j - 1.
      for (size_t j = r.prompt.size(); j < st.tokens.size(); ++j)
        st.logit_rows.push_back(static_cast<int32_t>(j - 1));
    }
    ForwardOptions fo;
    fo.aux = true;
    fo.aux_layers = aux_layers;
    const ForwardOut fwd = policy.forward(cache, steps, fo);
    const int64_t R = fwd.logits.size(0);
    Tensor logp = Tensor::empty({R, V}, DType::F32);
    ops::log_softmax(fwd.logits.to(Device::CPU), logp);
    Tensor top_v = Tensor::empty({R, k}, DType::F32), top_i = Tensor::empty({R, k}, DType::I32);
    ops::topk(logp, k, top_v, top_i);
    const Tensor aux = fwd.aux.to(Device::CPU).reshape({-1, A * H});
    int64_t row = 0, logit_row = 0;
    for (size_t i = at; i < end; ++i) {
      const Rollout& r = rollouts[i];
      TttSample s;
      s.tokens = steps[i - at].tokens;
      s.prompt_length = static_cast<int64_t>(r.prompt.size());
      const int64_t n = s.length(), nr = s.response_length();
      const Tensor view = aux.rows(row, row + n);
      if (view.dtype() == opts.aux_dtype) {  // own copy, not a view that pins the whole batch
        s.aux = Tensor::empty(view.shape(), view.dtype());
        s.aux.copy_from(view);
      } else {
        s.aux = view.to_dtype(opts.aux_dtype);
      }
      s.teacher_k = k;
      const float* vp = top_v.data<float>() + logit_row * k;
      const int32_t* ip = top_i.data<int32_t>() + logit_row * k;
      s.teacher_logprobs.assign(vp, vp + nr * k);
      s.teacher_ids.assign(ip, ip + nr * k);
      s.policy_version = policy_version;
      row += n;
      logit_row += nr;
      out.push_back(std::move(s));
    }
    at = end;
  }
  return out;
}

TttSample sample_of(const GenResult& g, uint64_t policy_version) {
  UPD_CHECK(g.aux.defined()) << "sample_of: result " << g.id << " was not captured";
  TttSample t;
  t.tokens = g.prompt;
  t.tokens.insert(t.tokens.end(), g.tokens.begin(), g.tokens.end());
  t.prompt_length = static_cast<int64_t>(g.prompt.size());
  t.aux = g.aux;
  t.teacher_k = g.teacher_k;
  t.teacher_ids = g.teacher_ids;
  t.teacher_logprobs = g.teacher_logprobs;
  t.policy_version = policy_version;
  for (const SpecRound& r : g.rounds)
    if (r.rejected_at >= 0)
      t.rejected.push_back(r.rejected_at);
  return t;
}

std::vector<TttSample> split_sample(const TttSample& s, int64_t max_tokens) {
  UPD_REQUIRE(max_tokens >= 2) << "split_sample: max_tokens " << max_tokens << " < 2";
  const int64_t n = s.length(), P = s.prompt_length, k = s.teacher_k;
  if (n <= max_tokens)
    return {s};
  std::vector<TttSample> out;
  int64_t a = P - std::min(P, max_tokens / 2), first = P;  // first: the chunk's first trained token
  for (;;) {
    const int64_t b = std::min(n, a + max_tokens);
    TttSample c;
    c.tokens.assign(s.tokens.begin() + a, s.tokens.begin() + b);
    c.prompt_length = first - a;
    const Tensor view = s.aux.rows(a, b);
    c.aux = Tensor::empty(view.shape(), view.dtype(), view.device());
    c.aux.copy_from(view);
    c.teacher_k = k;
    c.teacher_ids.assign(s.teacher_ids.begin() + (first - P) * k, s.teacher_ids.begin() + (b - P) * k);
    c.teacher_logprobs.assign(s.teacher_logprobs.begin() + (first - P) * k, s.teacher_logprobs.begin() + (b - P) * k);
    c.policy_version = s.policy_version;
    for (int32_t r : s.rejected)
      if (r >= first - P && r < b - P)
        c.rejected.push_back(static_cast<int32_t>(r - (first - P)));
    out.push_back(std::move(c));
    if (b >= n)
      return out;
    a = b - 1;
    first = b;
  }
}

}  // namespace updraft
