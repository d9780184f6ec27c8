#include "rollout/capture/step_capture.h"

#include <algorithm>
#include <chrono>

#include "kernels/core/error.h"
#include "kernels/ops.h"

namespace updraft {

double capture_step(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run,
                    int64_t teacher_k) {
  bool any = false;
  for (const StepEntry& e : plan.entries)
    any |= e.seq->req.capture;
  if (!any)
    return 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor top_lp, top_ids;
  if (run.logp.defined()) {  // the teacher: top-k of every logit row's log-probabilities (ties: lower id)
    const int64_t R = run.logp.size(0), k = std::min<int64_t>(teacher_k, run.logp.size(1));
    Tensor vals = Tensor::empty({R, k}, DType::F32, run.logp.device()),
           idx = Tensor::empty({R, k}, DType::I32, run.logp.device());
    ops::topk(run.logp, k, vals, idx);
    top_lp = vals.to(Device::CPU);
    top_ids = idx.to(Device::CPU);
  }
  const int64_t W = run.fo.aux.numel() / std::max<int64_t>(1, run.fo.aux.size(0));
  Tensor aux = run.fo.aux.to(Device::CPU).reshape({-1, W});
  if (aux.dtype() != DType::F32)
    aux = aux.to_dtype(DType::F32);
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    Seq& s = *plan.entries[e].seq;
    if (!s.req.capture)
      continue;
    const Committed& c = committed[e];
    if (!c.teacher_rows.empty()) {
      const int64_t k = top_lp.size(1);
      s.result.teacher_k = k;
      for (int32_t row : c.teacher_rows) {
        const int32_t* ids = top_ids.data<int32_t>() + static_cast<int64_t>(row) * k;
        const float* lps = top_lp.data<float>() + static_cast<int64_t>(row) * k;
        s.result.teacher_ids.insert(s.result.teacher_ids.end(), ids, ids + k);
        s.result.teacher_logprobs.insert(s.result.teacher_logprobs.end(), lps, lps + k);
      }
    }
    for (size_t i = 0; i < c.rows.size(); ++i) {
      if (c.first_pos + static_cast<int64_t>(i) != s.cap_rows)
        continue;  // captured before a preemption
      const float* a = aux.data<float>() + static_cast<int64_t>(c.rows[i]) * W;
      s.cap_aux.insert(s.cap_aux.end(), a, a + W);
      ++s.cap_rows;
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void finish_capture(Seq& s, int64_t aux_width) {
  const int64_t n = s.prompt_len() + s.out_len();
  s.cap_aux.resize(static_cast<size_t>(n * aux_width), 0.f);
  s.result.aux = Tensor::from_f32(s.cap_aux, {n, aux_width}).to_dtype(DType::BF16);
  s.cap_aux.clear();
  s.cap_aux.shrink_to_fit();
  UPD_CHECK(s.out_len() == 0 || s.result.teacher_k > 0) << "capture: output tokens without teacher rows";
  UPD_CHECK(s.result.teacher_ids.size() == static_cast<size_t>(s.out_len() * s.result.teacher_k))
      << "capture: " << s.result.teacher_ids.size() / static_cast<size_t>(std::max<int64_t>(1, s.result.teacher_k))
      << " teacher rows captured for " << s.out_len() << " output tokens";
}

}  // namespace updraft
