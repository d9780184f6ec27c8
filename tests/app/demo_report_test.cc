// The demo's summary figures (app/demo/report.h): drift, recovery after a curriculum switch,
// the trainer's compute share, and the plot's reference lines.
#include <gtest/gtest.h>

#include "app/demo/report.h"

namespace updraft::demo {
namespace {

std::vector<StepRecord> steps_with(const std::vector<double>& tau_online) {
  std::vector<StepRecord> v;
  for (size_t i = 0; i < tau_online.size(); ++i) {
    StepRecord r;
    r.step = static_cast<int64_t>(i + 1);
    r.tau_online = tau_online[i];
    r.tau_frozen = 2.0;
    v.push_back(r);
  }
  return v;
}

TEST(DemoReport, RecoveryCountsStepsAfterTheSwitchUntil70PercentOfTheFirstStage) {
  // First stage mean 3.0, so the threshold is 2.1: first reached at index 6, 3 steps after the switch.
  const std::vector<StepRecord> steps = steps_with({2.8, 3.2, 3.0, 1.5, 1.9, 2.05, 2.1, 1.8, 2.5});
  const Summary s = summarize(steps, 3);
  EXPECT_DOUBLE_EQ(s.pre_switch_tau, 3.0);
  EXPECT_EQ(s.recovery_steps, 3);
  // Reached on the first step of the second stage: 0 steps.
  EXPECT_EQ(summarize(steps_with({2.0, 2.0, 1.5}), 2).recovery_steps, 0);
}

TEST(DemoReport, NoRecoveryFiguresWhenNeverReachedOrWithoutASwitch) {
  const Summary never = summarize(steps_with({3.0, 3.0, 1.5, 2.0, 2.09}), 2);
  EXPECT_DOUBLE_EQ(never.pre_switch_tau, 3.0);
  EXPECT_EQ(never.recovery_steps, -1);
  for (size_t sw : {size_t{0}, size_t{5}}) {
    const Summary none = summarize(steps_with({3.0, 3.0, 1.5, 2.0, 2.5}), sw);
    EXPECT_EQ(none.pre_switch_tau, 0.0);
    EXPECT_EQ(none.recovery_steps, -1);
  }
}

TEST(DemoReport, TrainerShareIsTrainerCpuOverRolloutCpuOverTheRun) {
  std::vector<StepRecord> steps = steps_with({2.0, 2.0});
  steps[0].rollout_cpu_s = 1.0;
  steps[0].trainer_cpu_s = 6.0;
  steps[1].rollout_cpu_s = 3.0;
  steps[1].trainer_cpu_s = 2.0;
  EXPECT_DOUBLE_EQ(summarize(steps, 0).trainer_share, 2.0);  // (6 + 2) / (1 + 3), not the mean of 6 and 2/3
  EXPECT_DOUBLE_EQ(step_json(steps[1])["trainer_share"].get<double>(), 2.0 / 3.0);
}

TEST(DemoReport, PlotDrawsTheReferencesAndTheRecoveryThresholdWhenMeasured) {
  const std::vector<StepRecord> steps = steps_with({3.0, 3.0, 1.5, 2.5});
  Summary s = summarize(steps, 2);
  const std::string bare = render_svg(steps, Summary{}, "t");
  EXPECT_EQ(bare.find("strong reference"), std::string::npos);
  EXPECT_EQ(bare.find("70% of the online tau"), std::string::npos);
  s.final_strong_tau = 4.25;
  s.final_quick_tau = 2.5;
  const std::string svg = render_svg(steps, s, "t");
  EXPECT_NE(svg.find("strong reference, final policy 4.25"), std::string::npos);
  EXPECT_NE(svg.find("quick reference, final policy 2.50"), std::string::npos);
  EXPECT_NE(svg.find("70% of the online tau before the switch 2.10"), std::string::npos);
}

}  // namespace
}  // namespace updraft::demo
