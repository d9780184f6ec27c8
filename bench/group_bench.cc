#include "bench/group_bench.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/bench_args.h"
#include "rollout/engine/engine.h"

namespace updraft::bench {
namespace {

enum class Arm { kPlain, kEagle, kSuffix, kMerged };
constexpr Arm kArms[] = {Arm::kPlain, Arm::kEagle, Arm::kSuffix, Arm::kMerged};
const char* arm_name(Arm a) {
  switch (a) {
    case Arm::kPlain:
      return "plain";
    case Arm::kEagle:
      return "eagle only";
    case Arm::kSuffix:
      return "suffix only";
    case Arm::kMerged:
      return "merged";
  }
  return "?";
}

struct Totals {
  double seconds = 0, suffix_seconds = 0, bar_sum = 0, forward_seconds = 0;
  int64_t tokens = 0, steps = 0, suffix_nodes = 0, suffix_steps = 0;
  int64_t depth_sum = 0, depth_steps = 0;  // the drafter's depth over the decode steps
  SpecStats spec;

  void add(const Totals& t) {
    seconds += t.seconds;
    suffix_seconds += t.suffix_seconds;
    bar_sum += t.bar_sum;
    forward_seconds += t.forward_seconds;
    tokens += t.tokens;
    steps += t.steps;
    suffix_nodes += t.suffix_nodes;
    suffix_steps += t.suffix_steps;
    depth_sum += t.depth_sum;
    depth_steps += t.depth_steps;
    spec.merge(t.spec);
  }
};

// One arm's engine for a turn: its own depth chooser, and the totals of its timed groups.
struct ArmEngine {
  Arm arm;
  std::unique_ptr<AdaptiveDepth> chooser;
  std::unique_ptr<Engine> engine;
  Totals t;
};

ArmEngine make_arm(const GroupBenchArgs& a, Arm arm) {
  EngineOptions o;
  o.max_batch = a.group;
  o.kv_cache_bytes = int64_t{1} << 30;
  o.prefill_chunk = 4096;
  o.spec = a.spec;
  if (arm == Arm::kSuffix || arm == Arm::kMerged) {
    o.suffix = a.suffix;
    o.suffix.mode = SuffixMode::kBoth;
  }
  const bool eagle = arm == Arm::kEagle || arm == Arm::kMerged;
  ArmEngine ae{arm,
               std::make_unique<AdaptiveDepth>(a.spec),
               std::make_unique<Engine>(*a.model, o, eagle ? a.draft : nullptr),
               {}};
  if (a.adaptive)
    ae.engine->set_depth_chooser(ae.chooser.get());
  return ae;
}

// Group `g` (prompt index) through one arm's engine, siblings together (live) or one at a time;
// timed groups add to the arm's totals.
void run_group(const GroupBenchArgs& a, ArmEngine& ae, int64_t g, bool timed, bool live, int rep) {
  Engine& e = *ae.engine;
  const std::vector<int32_t>& prompt = a.prompts[static_cast<size_t>(g) % a.prompts.size()];
  for (int64_t j = 0; j < a.group;) {
    const int64_t n = live ? a.group : 1;
    for (int64_t k = 0; k < n; ++k, ++j) {
      GenRequest q;
      q.prompt = prompt;
      q.params.temperature = a.temperature;
      q.params.has_seed = true;
      q.params.seed = static_cast<uint64_t>(1000003 * rep + 1009 * g + j + 1);
      q.params.max_new_tokens = a.tokens + 1;
      q.params.ignore_eos = a.ignore_eos;
      e.submit(q);
    }
    e.step();  // prefill and the first token
    const EngineStats before = e.stats();
    const double f0 = e.decode_forward_parts().total_s;
    const double t0 = now_s();
    while (e.has_work())
      e.step();
    if (!timed)
      continue;
    Totals& t = ae.t;
    t.seconds += now_s() - t0;
    t.forward_seconds += e.decode_forward_parts().total_s - f0;
    const EngineStats& after = e.stats();
    t.tokens += after.generated_tokens - before.generated_tokens;
    t.steps += after.steps - before.steps;
    t.suffix_seconds += after.suffix_seconds - before.suffix_seconds;
    t.suffix_nodes += after.suffix_nodes - before.suffix_nodes;
    t.suffix_steps += after.suffix_steps - before.suffix_steps;
    t.bar_sum += after.suffix_bar_sum - before.suffix_bar_sum;
    for (size_t d = 0; d < after.depth_steps.size(); ++d) {
      const int64_t n = after.depth_steps[d] - (d < before.depth_steps.size() ? before.depth_steps[d] : 0);
      t.depth_sum += static_cast<int64_t>(d) * n;
      t.depth_steps += n;
    }
    SpecStats d = after.spec;
    d.subtract(before.spec);
    t.spec.merge(d);
  }
}

// One turn: an engine per arm, every group through each of them before the next group, the arms'
// order rotating from group to group, so that a slow spell of the host falls on every arm alike.
std::vector<Totals> run_turn(const GroupBenchArgs& a, bool live, int rep) {
  std::vector<ArmEngine> arms;
  for (Arm arm : kArms)
    arms.push_back(make_arm(a, arm));
  const auto n = static_cast<int64_t>(arms.size());
  for (int64_t w = -a.warmup; w < a.groups; ++w) {
    const bool timed = w >= 0;  // warm-up groups take the prompts after the timed ones
    const int64_t g = timed ? w : a.groups + a.warmup + w;
    for (int64_t k = 0; k < n; ++k)
      run_group(a, arms[static_cast<size_t>((k + g + rep) % n)], g, timed, live, rep);
  }
  std::vector<Totals> out;
  for (const ArmEngine& ae : arms)
    out.push_back(ae.t);
  return out;
}

void print_layout(const GroupBenchArgs& a, bool live) {
  Totals tot[4];
  for (int rep = 0; rep < a.reps; ++rep) {
    const std::vector<Totals> turn = run_turn(a, live, rep);
    for (Arm arm : kArms)
      tot[static_cast<int>(arm)].add(turn[static_cast<size_t>(arm)]);
  }
  std::printf("\n%s: groups of %ld siblings, %s\n", live ? "live groups" : "one sibling at a time", a.group,
              live ? "decoding together (batch = group)" : "each after the one before (batch 1)");
  std::printf("  %-12s %9s %7s %6s %22s %9s %12s %6s %8s %6s %6s %6s %6s\n", "arm", "t/s", "ratio", "tau",
              "accepted/round e|g|h", "drafted", "suffix cost", "bar", "grafting", "step", "draft", "verify", "fwd");
  const Totals& plain = tot[0];
  const double plain_tps = static_cast<double>(plain.tokens) / plain.seconds;
  const double plain_step = plain.seconds / static_cast<double>(plain.steps);
  for (Arm arm : kArms) {
    const Totals& t = tot[static_cast<int>(arm)];
    const double tps = static_cast<double>(t.tokens) / t.seconds;
    const double r = t.spec.rounds > 0 ? static_cast<double>(t.spec.rounds) : 1.0;
    char by[64], cost[32] = "-", bar[32] = "-", grafting[32] = "-";
    std::snprintf(by, sizeof by, "%.2f|%.2f|%.2f", t.spec.accepted_by[0] / r, t.spec.accepted_by[1] / r,
                  t.spec.accepted_by[2] / r);
    if (t.suffix_nodes > 0 || arm == Arm::kSuffix || arm == Arm::kMerged)  // per step, in plain steps
      std::snprintf(cost, sizeof cost, "%.2f%%", 100.0 * t.suffix_seconds / static_cast<double>(t.steps) / plain_step);
    if (t.suffix_steps > 0) {
      std::snprintf(bar, sizeof bar, "%.3f", t.bar_sum / static_cast<double>(t.suffix_steps));
      std::snprintf(grafting, sizeof grafting, "%.0f%%",
                    100.0 * static_cast<double>(t.suffix_steps) / static_cast<double>(t.steps));
    }
    std::printf("  %-12s %9.1f %6.2fx %6.2f %22s %9.2f %6.2f %12s %6s %8s %6.2f %5.0f%% %5.0f%% %5.0f%%\n",
                arm_name(arm), tps, tps / plain_tps, t.spec.tau(), by, static_cast<double>(t.spec.drafted) / r,
                t.depth_steps > 0 ? static_cast<double>(t.depth_sum) / static_cast<double>(t.depth_steps) : 0.0, cost,
                bar, grafting, t.seconds / static_cast<double>(t.steps) / plain_step,
                100.0 * t.spec.draft_seconds / t.seconds, 100.0 * t.spec.verify_seconds / t.seconds,
                100.0 * t.forward_seconds / t.seconds);
    std::fflush(stdout);
  }
}

}  // namespace

bool run_group_bench(GroupBenchArgs a) {
  if (a.warmup < 0)
    a.warmup = a.groups;
  if (a.groups + a.warmup > static_cast<int64_t>(a.prompts.size())) {
    std::fprintf(stderr, "spec_bench: %ld timed and %ld warm-up groups need as many prompts, have %zu\n", a.groups,
                 a.warmup, a.prompts.size());
    return false;
  }
  std::printf(
      "group drafting: %ld groups of %ld siblings (held-out prompts), temperature %.2f, %ld new tokens at most, "
      "drafter chain/tree {steps %ld, top_k %ld, tokens %ld}, suffix drafts up to %ld nodes (min prob %.2f), "
      "%ld turns interleaved\n",
      a.groups, a.group, a.temperature, a.tokens, a.spec.steps, a.spec.top_k, a.spec.draft_tokens, a.suffix.max_nodes,
      a.suffix.min_prob, a.reps);
  std::printf(
      "suffix drafts: %.2f nodes per matched token, matches of %ld tokens or more; drafter depth %s; %ld "
      "untimed groups of other prompts first in each engine\n",
      a.suffix.spec_factor, a.suffix.min_match, a.adaptive ? "adaptive (chosen per step)" : "fixed", a.warmup);
  print_layout(a, true);
  print_layout(a, false);
  std::printf(
      "\ntau: 1 + accepted drafts per round; accepted/round by source (eagle | group | history); drafted: drafts "
      "verified per round; depth: the drafter's depth per decode step, mean (0: plain); suffix cost: lookups and "
      "grafting per step as a share of a plain step; bar: the least "
      "path probability a new suffix node needed, mean over grafting steps (DepthChooser::row_worth over "
      "SuffixCalibration's factor); grafting: "
      "the steps that grafted suffix drafts; step: an "
      "engine step's wall time in plain steps; draft, verify: the drafter's passes and the speculating steps' policy "
      "forwards as shares of the arm's time; fwd: every decode step's policy forward, plain or speculating, as the "
      "forward's own profile times it (on a GPU, the host's time to issue it; the two timers differ by a few "
      "points), so 100%% - draft - fwd is about the time in sampling, verification, copies and bookkeeping.\n");
  return true;
}

}  // namespace updraft::bench
