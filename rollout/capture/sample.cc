#include "rollout/capture/sample.h"

#include <cmath>

#include "kernels/core/error.h"

namespace updraft {

void TttSample::validate(int64_t aux_width, int64_t vocab, const char* where) const {
  const int64_t n = length();
  UPD_REQUIRE(n >= 1 && prompt_length >= 0 && prompt_length <= n)
      << where << ": " << n << " tokens with prompt length " << prompt_length;
  UPD_REQUIRE(aux.defined() && aux.dim() == 2 && aux.size(0) == n && aux.size(1) == aux_width && aux.is_cpu())
      << where << ": aux must be [" << n << ", " << aux_width << "] on the CPU, got "
      << (aux.defined() ? aux.str() : "nothing");
  for (int32_t t : tokens)
    UPD_REQUIRE(t >= 0 && t < vocab) << where << ": token " << t << " outside the vocabulary [0, " << vocab << ")";
  const size_t want = static_cast<size_t>(response_length() * teacher_k);
  UPD_REQUIRE(teacher_k >= 0 && teacher_ids.size() == want && teacher_logprobs.size() == want)
      << where << ": teacher must be [" << response_length() << ", " << teacher_k << "]";
  for (int32_t t : teacher_ids)
    UPD_REQUIRE(t >= 0 && t < vocab) << where << ": teacher id " << t << " outside the vocabulary";
  for (float lp : teacher_logprobs)
    UPD_REQUIRE(std::isfinite(lp) && lp <= 1e-3f) << where << ": teacher logprob " << lp << " is not a finite log-probability";
  for (size_t i = 0; i < rejected.size(); ++i)
    UPD_REQUIRE(rejected[i] >= 0 && rejected[i] < response_length() && (i == 0 || rejected[i] > rejected[i - 1]))
        << where << ": rejected position " << rejected[i] << " is not an ascending response index";
  const int64_t bad = aux.first_non_finite();
  UPD_REQUIRE(bad < 0) << where << ": aux element " << bad << " is not finite";
}

}  // namespace updraft
