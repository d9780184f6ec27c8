// split_sample (rollout/capture/capture.h): a long sample cut into records of at most N positions keeps
// every response token exactly once, with its teacher row and the aux state of the position
// that produced it, and each piece validates.
#include <gtest/gtest.h>

#include "kernels/core/error.h"
#include "rollout/capture/capture.h"

namespace updraft::train {
namespace {

// n positions, prompt P, aux width 2 (row i = [i, -i]), teacher k = 2 (row j = ids j, j + 1),
// every third response position marked rejected.
TttSample numbered(int64_t n, int64_t P) {
  TttSample s;
  s.prompt_length = P;
  s.policy_version = 7;
  s.aux = Tensor::empty({n, 2}, DType::F32);
  for (int64_t i = 0; i < n; ++i) {
    s.tokens.push_back(static_cast<int32_t>(i));
    s.aux.data<float>()[2 * i] = static_cast<float>(i);
    s.aux.data<float>()[2 * i + 1] = -static_cast<float>(i);
  }
  s.teacher_k = 2;
  for (int64_t j = P; j < n; ++j)
    for (int64_t c = 0; c < 2; ++c) {
      s.teacher_ids.push_back(static_cast<int32_t>(j + c));
      s.teacher_logprobs.push_back(-static_cast<float>(j));
    }
  for (int64_t r = 0; r < n - P; r += 3)
    s.rejected.push_back(static_cast<int32_t>(r));
  return s;
}

TEST(SplitSample, EveryResponseTokenOnceWithItsTeacherAndProducingState) {
  for (const auto& [n, P, cap] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {100, 10, 16}, {100, 40, 16}, {100, 0, 7}, {33, 5, 2}, {20, 5, 20}, {20, 19, 8}}) {
    const TttSample s = numbered(n, P);
    const std::vector<TttSample> pieces = split_sample(s, cap);
    if (n <= cap) {
      ASSERT_EQ(pieces.size(), 1u);
    }
    std::vector<int> seen(static_cast<size_t>(n), 0), marked(static_cast<size_t>(n), 0);
    for (const TttSample& p : pieces) {
      ASSERT_LE(p.length(), cap);
      EXPECT_NO_THROW(p.validate(2, 1000, "piece"));
      EXPECT_EQ(p.policy_version, 7u);
      const int64_t a = p.tokens[0];  // the piece's first global position
      for (int64_t i = 0; i < p.length(); ++i) {
        EXPECT_EQ(p.tokens[static_cast<size_t>(i)], a + i);
        EXPECT_EQ(p.aux.data<float>()[2 * i], static_cast<float>(a + i));
      }
      for (int32_t r : p.rejected)  // each chunk's own response indices
        ++marked[static_cast<size_t>(a + p.prompt_length + r)];
      for (int64_t r = 0; r < p.response_length(); ++r) {
        const int64_t global = a + p.prompt_length + r;
        ASSERT_GE(global, P);
        ++seen[static_cast<size_t>(global)];
        EXPECT_EQ(p.teacher_ids[static_cast<size_t>(2 * r)], global);
        EXPECT_EQ(p.teacher_logprobs[static_cast<size_t>(2 * r + 1)], -static_cast<float>(global));
        if (global > 0) {  // the state that produced it is in the same piece
          EXPECT_GE(global - 1, a);
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(seen[static_cast<size_t>(i)], i >= P ? 1 : 0) << "n " << n << " P " << P << " cap " << cap << " i " << i;
      EXPECT_EQ(marked[static_cast<size_t>(i)], i >= P && (i - P) % 3 == 0 ? 1 : 0) << "rejected mark at " << i;
    }
    if (n > cap && P > cap / 2) {  // the first piece keeps half the cap of prompt context
      EXPECT_EQ(pieces[0].prompt_length, cap / 2);
    }
  }
  EXPECT_THROW(split_sample(numbered(10, 2), 1), Error);
}

}  // namespace
}  // namespace updraft::train
