#include "trainer/grpo.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "kernels/core/error.h"

namespace updraft::train {

std::vector<double> grpo_advantages(const std::vector<GrpoSample>& samples, bool normalize_std) {
  std::map<int64_t, std::pair<double, double>> moments;  // group -> (sum, sum of squares)
  std::map<int64_t, int64_t> count;
  for (const GrpoSample& s : samples) {
    moments[s.group].first += s.reward;
    moments[s.group].second += s.reward * s.reward;
    ++count[s.group];
  }
  std::vector<double> adv(samples.size(), 0.0);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto [sum, sq] = moments[samples[i].group];
    const double n = static_cast<double>(count[samples[i].group]);
    const double mean = sum / n, var = std::max(0.0, sq / n - mean * mean);
    const double std = std::sqrt(var);
    if (std < 1e-9)
      continue;  // all rewards equal: no signal
    adv[i] = (samples[i].reward - mean) / (normalize_std ? std + 1e-6 : 1.0);
  }
  return adv;
}

GrpoStats grpo_step(TrainableLlama& policy, AdamW& opt, const std::vector<GrpoSample>& samples, double lr,
                    const GrpoOptions& options) {
  UPD_REQUIRE(options.micro_batch_tokens > 0 && options.max_grad_norm > 0) << "grpo_step: bad options";
  GrpoStats st;
  const std::vector<double> adv = grpo_advantages(samples, options.normalize_std);
  std::map<int64_t, bool> group_active;
  std::vector<size_t> active;
  for (size_t i = 0; i < samples.size(); ++i) {
    const GrpoSample& s = samples[i];
    UPD_REQUIRE(!s.prompt.empty()) << "grpo_step: empty prompt";
    st.mean_reward += s.reward;
    st.tokens += static_cast<int64_t>(s.response.size());
    group_active[s.group] = group_active[s.group] || adv[i] != 0.0;
    if (adv[i] != 0.0 && !s.response.empty())
      active.push_back(i);
  }
  st.groups = static_cast<int64_t>(group_active.size());
  for (const auto& [g, a] : group_active)
    st.active_groups += a;
  if (!samples.empty())
    st.mean_reward /= static_cast<double>(samples.size());
  if (active.empty() || st.tokens == 0)
    return st;

  auto len = [&](size_t i) { return samples[i].prompt.size() + samples[i].response.size(); };
  std::sort(active.begin(), active.end(), [&](size_t a, size_t b) { return len(a) < len(b); });
  const double inv_tokens = 1.0 / static_cast<double>(st.tokens);
  double nll_sum = 0;
  int64_t nll_count = 0;
  policy.params().zero_grad();
  for (size_t begin = 0; begin < active.size();) {
    // Grow the micro-batch while batch × longest stays under the budget (always at least one).
    size_t end = begin + 1;
    while (end < active.size() &&
           static_cast<int64_t>((end + 1 - begin) * len(active[end])) <= options.micro_batch_tokens)
      ++end;
    const int64_t B = static_cast<int64_t>(end - begin);
    const int64_t L = static_cast<int64_t>(len(active[end - 1])), T = L - 1;
    if (T <= 0) {
      begin = end;
      continue;
    }
    std::vector<int32_t> tokens(static_cast<size_t>(B * L), 0);
    std::vector<float> weights(static_cast<size_t>(B * T), 0.f);
    for (int64_t b = 0; b < B; ++b) {
      const GrpoSample& s = samples[active[begin + static_cast<size_t>(b)]];
      const double a = adv[active[begin + static_cast<size_t>(b)]];
      int32_t* row = tokens.data() + b * L;
      std::copy(s.prompt.begin(), s.prompt.end(), row);
      std::copy(s.response.begin(), s.response.end(), row + s.prompt.size());
      // Position t predicts token t + 1: response token j (>= P) is predicted at t = j - 1.
      const int64_t P = static_cast<int64_t>(s.prompt.size()), n = P + static_cast<int64_t>(s.response.size());
      for (int64_t t = P - 1; t < n - 1; ++t)
        weights[static_cast<size_t>(b * T + t)] = static_cast<float>(a * inv_tokens);
    }
    const LmLoss l = policy.weighted_backward(tokens, B, T, weights, 1.0f);
    nll_sum += l.loss * static_cast<double>(l.targets);
    nll_count += l.targets;
    begin = end;
  }
  st.mean_nll = nll_count ? nll_sum / static_cast<double>(nll_count) : 0.0;
  st.grad_norm = clip_grad_norm(policy.params(), options.max_grad_norm);
  if (!std::isfinite(st.grad_norm)) {
    st.skipped = true;
  } else {
    opt.step(lr);
  }
  policy.params().zero_grad();
  return st;
}

}  // namespace updraft::train
