// The rollback watch's live verdict (rollout/worker/rollback.h), driven with made-up rounds: a
// new drafter is compared with its predecessor's recent rounds over the positions both tried,
// and only a live alarm costs a confirmation on recent completions (the scorer).
#include "rollout/worker/rollback.h"

#include <gtest/gtest.h>

#include "drafter/random_draft.h"
#include "rollout/random_policy.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/test_models.h"

namespace updraft {
namespace {

// `n` rounds at chain depth `depth`, `accepted[i % size]` tokens accepted in round i.
SpecStats rounds_of(int64_t n, int64_t depth, const std::vector<int64_t>& accepted) {
  SpecStats s;
  for (int64_t i = 0; i < n; ++i)
    s.add_round(depth, accepted[static_cast<size_t>(i) % accepted.size()]);
  return s;
}

class RollbackLive : public ::testing::Test {
 protected:
  RollbackLive()
      : policy_(random_policy(testing_models::tiny_config(), 3, DType::F32)),
        draft_(random_draft(testing_models::tiny_draft_config(policy_.config(), policy_.config().vocab_size),
                            VocabMap::identity(policy_.config().vocab_size), policy_.draft_target(), 5, DType::F32)) {}

  // The verdict on a successor whose rounds are `watched`, after a predecessor's `bar`; the scorer
  // (counted) gives the successor `scored_new` and the predecessor `scored_old`.
  RollbackWatch::Verdict verdict(const SpecStats& bar, const SpecStats& watched, double scored_new = 2.0,
                                 double scored_old = 2.0) {
    RollbackOptions o;
    o.rounds = 64;
    o.depth = 4;
    RollbackWatch w(o, [&, scored_new, scored_old](const DraftModel& d, const PolicyModel&,
                                                   const std::vector<TttSample>&, int64_t) {
      ++scored_;
      return &d == &draft_ ? scored_new : scored_old;
    });
    TttSample s;
    s.tokens = {1, 2, 3, 4, 5};
    s.prompt_length = 2;
    w.add_sample(s);
    w.add_rounds(bar);
    w.swapped();
    w.add_rounds(watched);
    EXPECT_TRUE(w.ready());
    return w.decide(draft_, other_, policy_);
  }

  PolicyModel policy_;
  DraftModel draft_, other_ = draft_;
  int scored_ = 0;
};

// After a domain switch the depth chooser keeps the new drafter at depth 1, while the bar's rounds
// ran at depth 3: on the first position, the one both tried, the new drafter is the better one,
// so no alarm and no confirmation. Counting positions 2-3 it never tried as rejected would have
// put it at 1.67 against the bar's 2.5, below 0.8 x 2.5.
TEST_F(RollbackLive, AShallowSuccessorIsComparedOnThePositionsItTried) {
  const SpecStats bar = rounds_of(256, 3, {0, 3});        // 1 + 0.5 + 0.5 + 0.5 = 2.5 at depth 3
  const SpecStats shallow = rounds_of(64, 1, {0, 1, 1});  // 1 + 0.67 on its one position
  EXPECT_EQ(verdict(bar, shallow), RollbackWatch::Verdict::kKeep);
  EXPECT_EQ(scored_, 0);
}

// The control: a shallow successor worse on the position both tried raises the alarm, and the
// confirmation on the same completions decides both ways.
TEST_F(RollbackLive, AShallowSuccessorWorseOnItsPositionsIsConfirmed) {
  const SpecStats bar = rounds_of(256, 3, {1, 3});           // first position always accepted
  const SpecStats shallow = rounds_of(64, 1, {0, 0, 0, 1});  // a quarter
  EXPECT_EQ(verdict(bar, shallow, 1.2, 2.0), RollbackWatch::Verdict::kRollBack);
  EXPECT_EQ(scored_, 2);
  EXPECT_EQ(verdict(bar, shallow, 2.0, 2.0), RollbackWatch::Verdict::kKeep);
  EXPECT_EQ(scored_, 4);
}

// At a shallow depth the margin applies to the accepted drafts: a first-position acceptance that
// falls from 0.8 to 0.6 (25%) raises the alarm, where 1.6 against 1.8 would have passed; 0.7
// (12.5%) does not.
TEST_F(RollbackLive, AtAShallowDepthTheMarginIsOnTheAcceptedDrafts) {
  const SpecStats bar = rounds_of(250, 3, {1, 1, 1, 1, 0});             // a1 = 0.8
  EXPECT_EQ(verdict(bar, rounds_of(64, 1, {1, 1, 1, 0, 0}), 1.0, 2.0),  // a1 = 0.6
            RollbackWatch::Verdict::kRollBack);
  EXPECT_EQ(scored_, 2);
  std::vector<int64_t> seven(10, 1);  // a1 = 0.7
  seven[0] = seven[1] = seven[2] = 0;
  EXPECT_EQ(verdict(bar, rounds_of(70, 1, seven)), RollbackWatch::Verdict::kKeep);
  EXPECT_EQ(scored_, 2);
}

// A bar of fewer rounds than a quarter of the watch compares nothing: the new drafter stays,
// unscored.
TEST_F(RollbackLive, ABarTooShortComparesNothing) {
  EXPECT_EQ(verdict(rounds_of(8, 4, {4}), rounds_of(64, 4, {0})), RollbackWatch::Verdict::kKeep);
  EXPECT_EQ(scored_, 0);
}

// Both at the full depth: the comparison is the full-depth tau, as before.
TEST_F(RollbackLive, SameDepthComparesTheFullDepth) {
  const SpecStats bar = rounds_of(256, 4, {4});
  EXPECT_EQ(verdict(bar, rounds_of(64, 4, {3, 4})), RollbackWatch::Verdict::kKeep);  // 4.5 against 5: within 20%
  EXPECT_EQ(scored_, 0);
  EXPECT_EQ(verdict(bar, rounds_of(64, 4, {2}), 1.0, 2.0), RollbackWatch::Verdict::kRollBack);  // 3 against 5
  EXPECT_EQ(scored_, 2);
}

// A confirmation scores the newest max_samples completions, oldest out.
TEST(RollbackWatch, ConfirmsOnTheNewestCompletions) {
  const PolicyModel policy = random_policy(testing_models::tiny_config(), 3, DType::F32);
  const DraftModel d =
      random_draft(testing_models::tiny_draft_config(policy.config(), policy.config().vocab_size),
                   VocabMap::identity(policy.config().vocab_size), policy.draft_target(), 5, DType::F32);
  RollbackOptions o;
  o.rounds = 4;
  o.max_samples = 3;
  std::vector<int32_t> firsts;
  RollbackWatch w(o, [&](const DraftModel&, const PolicyModel&, const std::vector<TttSample>& data, int64_t) {
    firsts.clear();
    for (const TttSample& s : data)
      firsts.push_back(s.tokens[0]);
    return 1.0;
  });
  for (int32_t i = 0; i < 5; ++i) {
    TttSample s;
    s.tokens = {i, 1, 2, 3};
    s.prompt_length = 1;
    w.add_sample(s);
  }
  w.add_rounds(rounds_of(16, 2, {2}));
  w.swapped();
  w.add_rounds(rounds_of(4, 2, {0}));
  EXPECT_EQ(w.decide(d, d, policy), RollbackWatch::Verdict::kKeep);  // equal on the same completions
  EXPECT_EQ(firsts, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(w.confirmations(), 1);
}

}  // namespace
}  // namespace updraft
