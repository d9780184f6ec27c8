#include "trainer/ttt_teacher.h"

#include <algorithm>
#include <cmath>

namespace updraft::train {

namespace {

// Sets row p's top-1 and weight.
void count_row(StepTeacher& st, int64_t p, int32_t top, float weight) {
  st.top[static_cast<size_t>(p)] = top;
  st.weight[static_cast<size_t>(p)] = weight;
  st.weight_sum += weight;
  ++st.rows;
}

}  // namespace

StepTeacher make_teacher(const TttSample& s, const VocabMap& vocab, int64_t k, double rejected_weight) {
  const int64_t n = s.length(), T = n - 1, Vd = vocab.draft_vocab();
  StepTeacher st;
  st.probs = Tensor::zeros({T, Vd}, DType::F32);
  st.top.assign(static_cast<size_t>(T), -1);
  st.weight.assign(static_cast<size_t>(T), 0.f);
  std::vector<float> weight_at(static_cast<size_t>(std::max<int64_t>(0, s.response_length())), 1.f);
  for (int32_t r : s.rejected)
    weight_at[static_cast<size_t>(r)] = static_cast<float>(rejected_weight);
  float* pp = st.probs.data<float>();
  for (int64_t p = 0; p < T; ++p) {
    const int64_t j = p + 2 + k;  // the token this row predicts
    if (j >= n || j < s.prompt_length)
      continue;
    const int64_t r = j - s.prompt_length;
    float* row = pp + p * Vd;
    if (s.teacher_k == 0) {
      const int32_t d = vocab.to_draft(s.tokens[static_cast<size_t>(j)]);
      if (d < 0)
        continue;
      row[d] = 1.f;
      count_row(st, p, d, weight_at[static_cast<size_t>(r)]);
      continue;
    }
    const int32_t* ids = s.teacher_ids.data() + r * s.teacher_k;
    const float* lps = s.teacher_logprobs.data() + r * s.teacher_k;
    int64_t best = 0;
    for (int64_t i = 1; i < s.teacher_k; ++i)
      if (lps[i] > lps[best])
        best = i;
    const int32_t top = vocab.to_draft(ids[best]);
    if (top < 0)
      continue;  // the teacher's top-1 is outside the draft vocabulary: the row does not count
    double mass = 0;
    for (int64_t i = 0; i < s.teacher_k; ++i) {
      const int32_t d = vocab.to_draft(ids[i]);
      if (d >= 0) {
        row[d] += std::exp(lps[i]);
        mass += std::exp(lps[i]);
      }
    }
    for (int64_t c = 0; c < Vd; ++c)
      row[c] = static_cast<float>(row[c] / mass);
    count_row(st, p, top, weight_at[static_cast<size_t>(r)]);
  }
  return st;
}

RowPlan plan_rows(const std::vector<StepTeacher>& teachers, int64_t T, bool prune) {
  const auto K = static_cast<int64_t>(teachers.size());
  RowPlan plan;
  plan.lo.assign(static_cast<size_t>(K), 0);
  plan.head.assign(static_cast<size_t>(K), 0);
  plan.steps = K;
  if (!prune)
    return plan;
  int64_t lo = T;
  for (int64_t k = K - 1; k >= 0; --k) {
    const auto& top = teachers[static_cast<size_t>(k)].top;
    int64_t first = 0;
    while (first < T && top[static_cast<size_t>(first)] < 0)
      ++first;
    plan.head[static_cast<size_t>(k)] = first;
    lo = std::min(lo, first);
    plan.lo[static_cast<size_t>(k)] = k == 0 ? 0 : lo;
  }
  while (plan.steps > 1 && plan.lo[static_cast<size_t>(plan.steps - 1)] == T)
    --plan.steps;
  return plan;
}

}  // namespace updraft::train
