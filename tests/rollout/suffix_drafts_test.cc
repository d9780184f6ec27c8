// Suffix drafts (rollout/spec/suffix_drafts.h) and merged trees in the engine:
//  - grafting: order by path probability, deduplication into existing children (the first source
//    kept, every proposer recorded), the budget, dropped parents; a round's drafter and suffix runs;
//  - the indexes: a sibling ahead drafts for the one behind, the history takes completed requests
//    only and weighs the newest policy's most, groups go with their last member;
//  - the engine, temperature 0: tokens, finish reasons and logprobs identical to plain decoding with
//    suffix drafts alone and merged with the drafter's chain or tree, requests joining in waves;
//  - the engine, temperature > 0: merged trees (point-mass suffix candidates beside the drafter's)
//    fit the policy's exact joint distribution of two tokens; the NoResidual control must fail;
//  - accounting: counts by source add up; probes get no suffix drafts; the chooser's runs.
#include "rollout/spec/suffix_drafts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "rollout/capture/record_convert.h"
#include "rollout/engine/commit.h"
#include "rollout/engine/engine.h"
#include "tests/rollout/chi2.h"
#include "tests/rollout/random_depth.h"
#include "tests/rollout/spec_fixture.h"

namespace updraft {
namespace {

using testing_spec::both;
using testing_spec::run_waves;

SourcedCandidate cand(int32_t token, int32_t parent, double path_prob, DraftSource src) {
  SuffixCandidate c;
  c.token = token;
  c.parent = parent;
  c.path_prob = path_prob;
  c.prob = path_prob;
  return {c, src};
}

TEST(SuffixGraft, MergesByProbabilityDeduplicatesAndKeepsTheBudget) {
  DraftTree t = DraftTree::single(7);  // a drafter's chain 7 -> 3 -> 4
  t.tokens = {7, 3, 4};
  t.parent = {-1, 0, 1};
  t.depth = {0, 1, 2};
  t.score = {0, -0.1f, -0.3f};
  const std::vector<std::vector<SourcedCandidate>> found = {
      {cand(3, -1, 0.9, DraftSource::kGroup), cand(5, 0, 0.8, DraftSource::kGroup),
       cand(6, 1, 0.2, DraftSource::kGroup)},
      {cand(9, -1, 0.5, DraftSource::kHistory), cand(2, 0, 0.45, DraftSource::kHistory)}};
  DraftTree a = t;
  EXPECT_EQ(graft_candidates(a, found, 3), 3);
  // 3 exists (kept as the drafter's); 3 -> 5 new (0.8); 9 (0.5); 9 -> 2 (0.45); budget ends there.
  // Renumbered breadth-first, children by score: 7; 3 (-0.1), 9 (log 0.5); 5 (log 0.8), 4 (-0.3); 2.
  const std::vector<int32_t> tokens = {7, 3, 9, 5, 4, 2}, parent = {-1, 0, 0, 1, 1, 2}, depth = {0, 1, 1, 2, 2, 2};
  EXPECT_EQ(a.tokens, tokens);
  EXPECT_EQ(a.parent, parent);
  EXPECT_EQ(a.depth, depth);
  ASSERT_EQ(a.source.size(), 6u);
  EXPECT_EQ(a.source_of(1), DraftSource::kEagle);
  EXPECT_EQ(a.source_of(2), DraftSource::kHistory);
  EXPECT_EQ(a.source_of(3), DraftSource::kGroup);
  EXPECT_EQ(a.source_of(4), DraftSource::kEagle);
  EXPECT_NEAR(a.score[3], std::log(0.8), 1e-6);
  // Every source that proposed a node is kept: 3 came from the drafter and the group.
  const auto bit = [](DraftSource s) { return static_cast<uint8_t>(1u << static_cast<int>(s)); };
  EXPECT_EQ(a.proposers,
            (std::vector<uint8_t>{bit(DraftSource::kEagle), bit(DraftSource::kEagle) | bit(DraftSource::kGroup),
                                  bit(DraftSource::kHistory), bit(DraftSource::kGroup), bit(DraftSource::kEagle),
                                  bit(DraftSource::kHistory)}));
  EXPECT_TRUE(a.from_suffix(1));
  EXPECT_FALSE(a.from_suffix(4));
  // A round's runs: the accepted path's prefix of drafter nodes, and of nodes a suffix index proposed.
  Verdict v;
  v.nodes = {1, 3};  // 3 -> 5: the group's path, its first node shared with the drafter
  SpecRound r = round_of(a, v);
  EXPECT_EQ(r.eagle_run, 1);
  EXPECT_EQ(r.suffix_run, 2);
  EXPECT_EQ(r.eagle_depth, 2);
  v.nodes = {1, 4};  // 3 -> 4: the drafter's chain
  r = round_of(a, v);
  EXPECT_EQ(r.eagle_run, 2);
  EXPECT_EQ(r.suffix_run, 1);
  // With a budget of 1, 5's child 6 has no parent in the tree and is dropped; so is 2.
  DraftTree b = t;
  EXPECT_EQ(graft_candidates(b, found, 1), 1);
  EXPECT_EQ(b.size(), 4);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{7, 3, 5, 4}));
  // Parents precede children, whatever was grafted.
  for (int64_t i = 1; i < a.size(); ++i)
    EXPECT_LT(a.parent[i], i);
}

TEST(SuffixGraft, OptionsAreCheckedByName) {
  SuffixOptions o;
  o.mode = SuffixMode::kBoth;
  o.max_nodes = 0;
  EXPECT_THROW(o.validate(), Error);
  EXPECT_EQ(parse_suffix_mode("history"), SuffixMode::kHistory);
  try {
    parse_suffix_mode("all");
    FAIL() << "accepted an unknown mode";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("off, group, history, both"), std::string::npos) << e.what();
  }
}

TEST(SuffixDraftsIndex, SiblingAheadDraftsForTheOneBehind) {
  SuffixDrafts d(both());
  d.join(1, 0, {1, 2, 3});
  d.join(2, 0, {1, 2, 3});  // same prompt: same group
  d.join(3, 0, {9, 8});     // another group
  d.extend(1, {4, 5, 6, 7});
  DraftTree t = DraftTree::single(3);
  // Sibling 1's 4 5 6 7, a chain, cut to 1 x the match length (3: the prompt).
  EXPECT_EQ(d.graft(2, {1, 2, 3}, 8, t), 3);
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(t.source_of(3), DraftSource::kGroup);
  SuffixOptions wide = both();
  wide.spec_factor = 2;
  SuffixDrafts w(wide);
  w.join(1, 7, {1, 2, 3});
  w.join(2, 7, {5, 2, 3});  // an explicit group: the prompts need not agree
  w.extend(1, {4, 5, 6, 7});
  DraftTree wt = DraftTree::single(3);
  EXPECT_EQ(w.graft(2, {5, 2, 3}, 8, wt), 4) << "a 2-token match at factor 2";
  wide.min_match = 3;
  SuffixDrafts strict(wide);
  strict.join(1, 7, {1, 2, 3});
  strict.join(2, 7, {5, 2, 3});
  strict.extend(1, {4, 5, 6, 7});
  DraftTree st = DraftTree::single(3);
  EXPECT_EQ(strict.graft(2, {5, 2, 3}, 8, st), 0) << "a match shorter than min_match drafted";
  DraftTree other = DraftTree::single(8);
  EXPECT_EQ(d.graft(3, {9, 8}, 8, other), 0) << "another group's text leaked in";
  DraftTree shallow = DraftTree::single(3);
  EXPECT_EQ(d.graft(2, {1, 2, 3}, 2, shallow), 2) << "max_depth not kept";
  EXPECT_EQ(d.groups(), 2);
  d.leave(3, false, {9, 8}, {});
  EXPECT_EQ(d.groups(), 1);
  EXPECT_EQ(d.history_tokens(), 0) << "an aborted request joined the history";
  d.leave(1, true, {1, 2, 3}, {4, 5, 6, 7});
  EXPECT_EQ(d.history_tokens(), 7);
  d.leave(2, true, {1, 2, 3}, {8});
  EXPECT_EQ(d.groups(), 0);
  // The history now drafts for a new request with that prompt: 4 (weight 1) and 8 (weight 1) tie;
  // after a policy change a completion weighs twice as much and leads.
  d.policy_changed();
  d.join(4, 0, {5, 5});
  d.leave(4, true, {1, 2, 3}, {8, 8});
  DraftTree h = DraftTree::single(3);
  d.join(5, 0, {1, 2, 3});
  ASSERT_GT(d.graft(5, {1, 2, 3}, 1, h), 0);
  EXPECT_EQ(h.tokens[1], 8);
  EXPECT_EQ(h.source_of(1), DraftSource::kHistory);
}

using SuffixEngine = testing_spec::SpecFixture;

TEST_F(SuffixEngine, GreedyIsTokenIdenticalToPlainDecodingWithMergedTrees) {
  const std::vector<GenRequest> reqs = sibling_requests();
  EngineOptions o;
  o.kv_cache_bytes = 64 << 20;
  o.prefill_chunk = 7;
  const std::vector<GenResult> plain = run_waves(*model_, nullptr, reqs, o, 5);
  for (SuffixMode mode : {SuffixMode::kGroup, SuffixMode::kHistory, SuffixMode::kBoth})
    for (const std::optional<SpecSettings>& s :
         std::vector<std::optional<SpecSettings>>{std::nullopt, SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}})
      for (int64_t batch : {1, 12}) {
        EngineOptions so = o;
        so.max_batch = batch;
        so.suffix = both();
        so.suffix.mode = mode;
        if (s)
          so.spec = *s;
        EngineStats st;
        const auto got = run_waves(*model_, s ? draft_.get() : nullptr, reqs, so, 5, &st);
        const std::string where = std::string(suffix_mode_name(mode)) + ", drafter " +
                                  (!s           ? "none"
                                   : s->chain() ? "chain"
                                                : "tree") +
                                  ", batch " + std::to_string(batch);
        ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(got, plain, where));
        const size_t src = mode == SuffixMode::kHistory ? 2 : 1;
        EXPECT_GT(st.spec.accepted_by[src], 20) << "suffix drafts were rarely accepted: " << where;
        EXPECT_GT(st.suffix_nodes, 0) << where;
        int64_t drafted = 0, accepted = 0;
        for (size_t k = 0; k < 3; ++k) {
          drafted += st.spec.drafted_by[k];
          accepted += st.spec.accepted_by[k];
        }
        EXPECT_EQ(drafted, st.spec.drafted) << where;
        EXPECT_EQ(accepted, st.spec.accepted) << where;
        // The records' rounds carry the same counts by source (rollout/capture/record_convert.h).
        int64_t rec_group = 0, rec_history = 0;
        for (const GenResult& g : got)
          for (const messaging::RoundStats& x : round_stats(g.rounds)) {
            EXPECT_LE(x.accepted_group + x.accepted_history, x.accepted) << where;
            rec_group += x.accepted_group;
            rec_history += x.accepted_history;
          }
        EXPECT_EQ(rec_group, st.spec.accepted_by[1]) << where;
        EXPECT_EQ(rec_history, st.spec.accepted_by[2]) << where;
        if (!s) {
          EXPECT_EQ(st.spec.drafted_by[0], 0) << where;
          EXPECT_EQ(st.drafter_spec.rounds, 0) << where;
        } else {
          EXPECT_GT(st.spec.accepted_by[0], 0) << where;
          // The drafter's own part: its drafts, and of the accepted path only the run it proposed.
          EXPECT_EQ(st.drafter_spec.drafted, st.spec.drafted_by[0]) << where;
          EXPECT_LE(st.drafter_spec.accepted, st.spec.accepted_by[0]) << where;
          EXPECT_GT(st.drafter_spec.accepted, 0) << where;
        }
      }
}

TEST_F(SuffixEngine, GatedSuffixDraftsStayLossless) {
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 16; ++i)
    reqs.push_back(req({static_cast<int32_t>(1 + i % 4), 2, 3, 1, 2}, 0.f, 30, 0));
  EngineOptions o;
  o.kv_cache_bytes = 64 << 20;
  const auto plain = run_waves(*model_, nullptr, reqs, o, 4);
  o.suffix = both();
  o.suffix.gate = true;
  o.spec = SpecSettings{4, 1, 5};
  Engine e(*model_, o, draft_.get());
  ASSERT_NE(e.suffix_gate(), nullptr);
  const auto got = run_waves(*model_, draft_.get(), reqs, o, 4);
  ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(got, plain, "gated"));
}

TEST_F(SuffixEngine, ProbesGetNoSuffixDrafts) {
  EngineOptions o;
  o.kv_cache_bytes = 64 << 20;
  o.suffix = both();
  o.spec = SpecSettings{4, 1, 5};
  Engine e(*model_, o, draft_.get());
  for (int i = 0; i < 6; ++i) {
    GenRequest r = req({1, 2, 3, 1, 2, 3}, 0.f, 24, 0);
    r.probe = true;
    e.submit(r);
  }
  e.run();
  EXPECT_EQ(e.stats().suffix_nodes, 0);
  EXPECT_EQ(e.stats().spec.drafted_by[1] + e.stats().spec.drafted_by[2], 0);
  EXPECT_GT(e.stats().spec.drafted_by[0], 0);
  // Without suffix drafts the drafter's part is the whole round.
  EXPECT_EQ(e.stats().drafter_spec.accepted, e.stats().spec.accepted);
  EXPECT_EQ(e.stats().drafter_spec.rounds, e.stats().spec.rounds);
}

// Every grafting step tells the chooser its suffix class and each sequence's runs (the step's
// depth, the drafter's run), whose suffix runs account for what was accepted beyond the drafter.
TEST_F(SuffixEngine, EveryGraftingStepTellsTheChooserItsRuns) {
  EngineOptions o;
  o.kv_cache_bytes = 64 << 20;
  o.max_batch = 3;
  o.suffix = both();
  o.spec = SpecSettings{4, 1, 5};
  Engine e(*model_, o, draft_.get());
  RandomDepth chooser(o.spec, 3);
  chooser.keep = true;  // every StepSample
  e.set_depth_chooser(&chooser);
  for (int i = 0; i < 12; ++i) {
    GenRequest r = req(testing_spec::pattern_prompt(i % 3, 5, cfg_.vocab_size), 0.f, 40, 0);
    r.params.ignore_eos = true;
    e.submit(r);
  }
  e.run();
  std::map<int, int64_t> classes;
  int64_t suffix_ahead = 0;
  for (const StepSample& s : chooser.seen) {
    ASSERT_TRUE(s.suffix >= 0 && s.suffix < DepthChooser::kSuffixClasses) << "the gate is off: all steps graft";
    ++classes[s.suffix];
    ASSERT_EQ(static_cast<int64_t>(s.runs.size()), s.batch);
    double beyond = 0;
    for (const StepSample::Runs& r : s.runs) {
      EXPECT_EQ(r.depth, s.depth);
      EXPECT_TRUE(r.eagle <= r.depth && r.suffix >= 0);
      beyond += std::max(0, r.suffix - r.eagle);
      suffix_ahead += r.suffix > r.eagle;
    }
    EXPECT_LE(s.extra_tokens, beyond + 1e-9) << "accepted beyond the drafter's run more than the suffix runs reach";
  }
  EXPECT_GT(classes[0] + classes[1], 0);
  EXPECT_GT(classes[2], 0) << "repeated prompts never matched far ahead";
  EXPECT_GT(suffix_ahead, 10);
}

// Merged trees under sampling: the history and the group hold many earlier samples of the prompt,
// so the root gets several point-mass candidates beside the drafter's (a tree's, and a chain's
// drafts drawn from the drafter's distribution, tried first); the two tokens must still follow
// the policy. Without a drafter, the suffix candidates alone under the NoResidual rule must fail
// the same test (its power), and so must the merged chain under PointResidual.
TEST_F(SuffixEngine, SampledMergedTreesFollowThePolicyDistribution) {
  using namespace testing_chi2;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
  const int64_t N = 12000, V = cfg_.vocab_size;
  const float temp = 1.3f;
  const auto joint = testing_spec::exact_pairs(*model_, prompt, temp, 0, 1.f);
  auto sample = [&](bool drafter, AcceptRule rule, uint64_t seed0, EngineStats* st, bool chain = false) {
    EngineOptions o;
    o.max_batch = 64;
    o.kv_cache_bytes = 64 << 20;
    o.spec = chain ? SpecSettings{4, 1, 5} : SpecSettings{3, 3, 8};
    o.draft_sampling = DraftSampling::kOn;
    o.suffix = both();
    o.accept_rule = rule;
    Engine e(*model_, o, drafter ? draft_.get() : nullptr);
    std::vector<GenResult> out;
    for (int64_t i = 0; i < N; ++i) {
      e.submit(req(prompt, temp, 2, seed0 + static_cast<uint64_t>(i)));
      if (i % 64 == 63)
        for (GenResult& g : e.step())
          out.push_back(std::move(g));
    }
    for (GenResult& g : e.run())
      out.push_back(std::move(g));
    if (st != nullptr)
      *st = e.stats();
    std::vector<int64_t> counts(static_cast<size_t>(V * V), 0);
    for (const auto& r : out)
      ++counts[r.tokens[0] * V + r.tokens[1]];
    return chi2_fit(counts, joint, N);
  };
  EngineStats st;
  const auto [stat, df] = sample(true, AcceptRule::Exact, 7'000'000, &st);
  EXPECT_LT(stat, chi2_critical(df)) << "merged-tree samples do not fit the policy";
  EXPECT_GT(st.spec.accepted_by[1] + st.spec.accepted_by[2], N / 10) << "too few suffix acceptances to mean anything";
  EXPECT_GT(st.spec.accepted_by[0], N / 50) << "too few drafter acceptances to mean anything";
  const auto [sstat, sdf] = sample(false, AcceptRule::Exact, 8'000'000, nullptr);
  EXPECT_LT(sstat, chi2_critical(sdf)) << "suffix-only samples do not fit the policy";
  const auto [bstat, bdf] = sample(false, AcceptRule::NoResidual, 9'000'000, nullptr);
  EXPECT_GT(bstat, chi2_critical(bdf)) << "the biased control passed: the test has no power";
  EngineStats cst;
  const auto [cstat, cdf] = sample(true, AcceptRule::Exact, 10'000'000, &cst, true);
  EXPECT_LT(cstat, chi2_critical(cdf)) << "merged-chain samples do not fit the policy";
  EXPECT_GT(cst.spec.accepted_by[1] + cst.spec.accepted_by[2], N / 10) << "too few suffix acceptances";
  EXPECT_GT(cst.spec.accepted_by[0], N / 50) << "too few drafter acceptances";
  const auto [pstat, pdf] = sample(true, AcceptRule::PointResidual, 11'000'000, nullptr, true);
  EXPECT_GT(pstat, chi2_critical(pdf)) << "the sampled-draft control passed: the test has no power";
}

}  // namespace
}  // namespace updraft
