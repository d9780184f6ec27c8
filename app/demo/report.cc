#include "app/demo/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace updraft::demo {
namespace {

double mean_of(const std::vector<StepRecord>& v, size_t begin, size_t end, double StepRecord::*field) {
  if (begin >= end)
    return 0.0;
  double s = 0;
  for (size_t i = begin; i < end; ++i)
    s += v[i].*field;
  return s / static_cast<double>(end - begin);
}

std::string fmt(const char* f, double a) {
  char buf[96];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

}  // namespace

double StepRecord::step_speedup() const {
  if (tokens_online <= 0 || tokens_plain <= 0)
    return 0.0;
  // Per generated token, so that the two runs' different lengths do not count.
  const double online = (gen_online_s + capture_s + update_s) / static_cast<double>(tokens_online);
  const double plain = (gen_plain_s + update_s) / static_cast<double>(tokens_plain);
  return online > 0 ? plain / online : 0.0;
}

Summary summarize(const std::vector<StepRecord>& steps, size_t switch_step) {
  Summary s;
  const size_t n = steps.size();
  if (n == 0)
    return s;
  if (switch_step > 0 && switch_step < n) {
    s.pre_switch_tau = mean_of(steps, 0, switch_step, &StepRecord::tau_online);
    for (size_t i = switch_step; i < n && s.recovery_steps < 0; ++i)
      if (steps[i].tau_online >= kRecoveryShare * s.pre_switch_tau)
        s.recovery_steps = static_cast<int64_t>(i - switch_step);
  }
  const size_t q = std::max<size_t>(1, n / 4), half = n / 2;
  s.frozen_tau_first_quarter = mean_of(steps, 0, q, &StepRecord::tau_frozen);
  s.frozen_tau_last_quarter = mean_of(steps, n - q, n, &StepRecord::tau_frozen);
  s.drift = s.frozen_tau_first_quarter > 0 ? 1.0 - s.frozen_tau_last_quarter / s.frozen_tau_first_quarter : 0.0;
  s.online_tau_second_half = mean_of(steps, half, n, &StepRecord::tau_online);
  s.frozen_tau_second_half = mean_of(steps, half, n, &StepRecord::tau_frozen);
  s.adapt_ratio = s.frozen_tau_second_half > 0 ? s.online_tau_second_half / s.frozen_tau_second_half : 0.0;
  double g = 0, w = 0, gen = 0, all = 0, trainer_cpu = 0, rollout_cpu = 0;
  for (const StepRecord& r : steps) {
    trainer_cpu += r.trainer_cpu_s;
    rollout_cpu += r.rollout_cpu_s;
    g += r.gen_speedup();
    w += r.step_speedup();
    gen += r.gen_online_s;
    all += r.gen_online_s + r.capture_s + r.update_s;
  }
  s.gen_share = all > 0 ? gen / all : 0.0;
  s.trainer_share = rollout_cpu > 0 ? trainer_cpu / rollout_cpu : 0.0;
  s.gen_speedup = g / static_cast<double>(n);
  s.step_speedup = w / static_cast<double>(n);
  s.reward_first = mean_of(steps, 0, q, &StepRecord::reward);
  s.reward_last = mean_of(steps, n - q, n, &StepRecord::reward);
  int64_t rounds = 0;
  for (const StepRecord& r : steps) {
    rounds += r.rounds_online;
    for (size_t k = 0; k < 3; ++k)
      s.accepted_per_round[k] += static_cast<double>(r.accepted_by[k]);
  }
  for (double& a : s.accepted_per_round)
    a = rounds > 0 ? a / static_cast<double>(rounds) : 0.0;
  return s;
}

nlohmann::json step_json(const StepRecord& s) {
  return {{"step", s.step},
          {"policy_version", s.policy_version},
          {"drafter_version", s.drafter_version},
          {"reward", s.reward},
          {"format_rate", s.format_rate},
          {"domain", s.domain},
          {"spec_share", s.spec_share},
          {"mean_depth", s.mean_depth},
          {"tau_online", s.tau_online},
          {"tau_frozen", s.tau_frozen},
          {"online_rounds", s.rounds_online},
          {"online_stalls", {{"steps", s.stall_steps_online}, {"seconds_over_cost", s.stall_s_online}}},
          {"online_accepted_by_source",
           {{"drafter", s.accepted_by[0]}, {"group", s.accepted_by[1]}, {"history", s.accepted_by[2]}}},
          {"tokens_per_s", {{"online", s.tps_online}, {"frozen", s.tps_frozen}, {"plain", s.tps_plain}}},
          {"seconds",
           {{"generate_online", s.gen_online_s},
            {"generate_frozen", s.gen_frozen_s},
            {"generate_plain", s.gen_plain_s},
            {"capture", s.capture_s},
            {"policy_update", s.update_s},
            {"trainer_slot", s.trainer_slot_s}}},
          {"cpu_seconds", {{"online_generation", s.rollout_cpu_s}, {"trainer_slot", s.trainer_cpu_s}}},
          {"trainer_share", s.rollout_cpu_s > 0 ? s.trainer_cpu_s / s.rollout_cpu_s : 0.0},
          {"tokens", {{"online", s.tokens_online}, {"plain", s.tokens_plain}}},
          {"generation_speedup", s.gen_speedup()},
          {"step_speedup", s.step_speedup()},
          {"records_acked", s.records_acked},
          {"drafters_promoted", s.promoted},
          {"grpo", {{"grad_norm", s.grad_norm}, {"nll", s.nll}}}};
}

nlohmann::json trainer_point_json(const TrainerPoint& p) {
  return {{"round", p.round},
          {"rl_step", p.rl_step},
          {"optimizer_steps", p.optimizer_steps},
          {"records_stored", p.records_stored},
          {"candidate_tau_hat", p.candidate_tau},
          {"serving_tau_hat", p.serving_tau},
          {"promoted", p.promoted}};
}

std::string render_svg(const std::vector<StepRecord>& steps, const Summary& sum, const std::string& title) {
  const double W = 760, H = 380, L = 60, R = 20, T = 40, B = 50;
  double ymax = 1.0;
  for (const StepRecord& s : steps)
    ymax = std::max({ymax, s.tau_online, s.tau_frozen});
  ymax = std::max({ymax, sum.final_quick_tau, sum.final_strong_tau});
  ymax = std::ceil(ymax + 0.25);
  const double ymin = 1.0;
  const size_t n = std::max<size_t>(steps.size(), 2);
  auto x = [&](double i) { return L + (W - L - R) * i / static_cast<double>(n - 1); };
  auto y = [&](double v) { return T + (H - T - B) * (1.0 - (v - ymin) / (ymax - ymin)); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" << title << "</text>\n";
  // Axes and grid.
  for (double v = ymin; v <= ymax + 1e-9; v += 0.5) {
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << y(v) << "\" y2=\"" << y(v)
      << "\" stroke=\"#e5e5e5\"/>\n";
    o << "<text x=\"" << L - 8 << "\" y=\"" << y(v) + 4 << "\" text-anchor=\"end\">" << fmt("%.1f", v) << "</text>\n";
  }
  o << "<line x1=\"" << L << "\" x2=\"" << L << "\" y1=\"" << T << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << H - B << "\" y2=\"" << H - B
    << "\" stroke=\"black\"/>\n";
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">RL step</text>\n";
  o << "<text x=\"16\" y=\"" << (T + H - B) / 2 << "\" transform=\"rotate(-90 16 " << (T + H - B) / 2
    << ")\" text-anchor=\"middle\">acceptance length tau</text>\n";
  // Markers: a policy update after every step (short grey ticks), drafter swaps (dashed blue).
  for (size_t i = 0; i < steps.size(); ++i) {
    o << "<line x1=\"" << x(static_cast<double>(i)) << "\" x2=\"" << x(static_cast<double>(i)) << "\" y1=\"" << H - B
      << "\" y2=\"" << H - B + 6 << "\" stroke=\"#999\"/>\n";
    if (steps.size() <= 20 || (i + 1) % 5 == 0)
      o << "<text x=\"" << x(static_cast<double>(i)) << "\" y=\"" << H - B + 18 << "\" text-anchor=\"middle\">"
        << steps[i].step << "</text>\n";
    if (i > 0 && steps[i].drafter_version != steps[i - 1].drafter_version)
      o << "<line x1=\"" << x(static_cast<double>(i) - 0.5) << "\" x2=\"" << x(static_cast<double>(i) - 0.5)
        << "\" y1=\"" << T << "\" y2=\"" << H - B << "\" stroke=\"#4a7bd0\" stroke-dasharray=\"4 3\"/>\n";
  }
  auto series = [&](double StepRecord::*f, const char* color) {
    o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < steps.size(); ++i)
      o << x(static_cast<double>(i)) << "," << y(steps[i].*f) << " ";
    o << "\"/>\n";
  };
  series(&StepRecord::tau_online, "#1f5fbf");
  series(&StepRecord::tau_frozen, "#d0542a");
  // The references (final policy) as dashed lines over the last quarter, labelled at the right.
  // A dashed line from step `from` to the right edge, labelled above its start.
  auto reference = [&](double tau, const char* color, const char* label, double from) {
    if (tau <= 0)
      return;
    o << "<line x1=\"" << x(from) << "\" x2=\"" << W - R << "\" y1=\"" << y(tau) << "\" y2=\"" << y(tau)
      << "\" stroke=\"" << color << "\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/><text x=\"" << x(from) + 4
      << "\" y=\"" << y(tau) - 5 << "\" fill=\"" << color << "\">" << label << fmt(" %.2f", tau) << "</text>\n";
  };
  const double last = static_cast<double>(n - 1);
  reference(sum.final_strong_tau, "#2a8a3e", "strong reference, final policy", last * 0.6);
  reference(sum.final_quick_tau, "#8a5a2a", "quick reference, final policy", last * 0.6);
  if (sum.pre_switch_tau > 0)
    reference(kRecoveryShare * sum.pre_switch_tau, "#999", "70% of the online tau before the switch", 0);
  const double lx = W - R - 250, ly = T + 8;
  o << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << ly << "\" y2=\"" << ly
    << "\" stroke=\"#1f5fbf\" stroke-width=\"2\"/><text x=\"" << lx + 30 << "\" y=\"" << ly + 4
    << "\">online drafter</text>\n";
  o << "<line x1=\"" << lx + 130 << "\" x2=\"" << lx + 154 << "\" y1=\"" << ly << "\" y2=\"" << ly
    << "\" stroke=\"#d0542a\" stroke-width=\"2\"/><text x=\"" << lx + 160 << "\" y=\"" << ly + 4
    << "\">frozen drafter</text>\n";
  o << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << ly + 18 << "\" y2=\"" << ly + 18
    << "\" stroke=\"#4a7bd0\" stroke-dasharray=\"4 3\"/><text x=\"" << lx + 30 << "\" y=\"" << ly + 22
    << "\">drafter swap</text>\n";
  o << "<line x1=\"" << lx + 130 << "\" x2=\"" << lx + 130 << "\" y1=\"" << ly + 14 << "\" y2=\"" << ly + 22
    << "\" stroke=\"#999\"/><text x=\"" << lx + 136 << "\" y=\"" << ly + 22 << "\">policy update</text>\n";
  o << "</svg>\n";
  return o.str();
}

std::vector<std::string> summary_table(const Summary& s) {
  std::vector<std::string> t;
  auto ref = [&](double v) { return v > 0 ? fmt(" %9.2f", v) : std::string("        -"); };
  t.push_back("                                   online   frozen     quick    strong (references)");
  t.push_back("tau, second half of the run     " + fmt("%8.2f", s.online_tau_second_half) +
              fmt(" %8.2f", s.frozen_tau_second_half) + "        -         -");
  t.push_back("tau, final policy (held-out)    " + fmt("%8.2f", s.final_online_tau) + fmt(" %8.2f", s.final_frozen_tau) +
              ref(s.final_quick_tau) + ref(s.final_strong_tau));
  t.push_back("frozen tau: first quarter " + fmt("%.2f", s.frozen_tau_first_quarter) + ", last quarter " +
              fmt("%.2f", s.frozen_tau_last_quarter) + " (drift " + fmt("%.0f%%", 100 * s.drift) + ")");
  t.push_back("online / frozen tau, second half: " + fmt("%.2fx", s.adapt_ratio) +
              (s.vs_quick > 0 ? "; on the final policy, online / quick " + fmt("%.2fx", s.vs_quick) : "") +
              (s.vs_strong > 0 ? ", online / strong " + fmt("%.2fx", s.vs_strong) : ""));
  if (s.pre_switch_tau > 0)
    t.push_back("recovery: online tau before the switch " + fmt("%.2f", s.pre_switch_tau) + "; 70% of it " +
                (s.recovery_steps >= 0 ? "reached " + std::to_string(s.recovery_steps) + " RL steps after the switch"
                                       : std::string("not reached")));
  t.push_back("trainer compute: " + fmt("%.2f", s.trainer_share) +
              " CPU-seconds per CPU-second of online generation" +
              (s.plain_tps_trainer_paused > 0
                   ? "; workers' plain decoding with the trainer running " +
                         fmt("%.2fx", s.plain_tps_trainer_running / s.plain_tps_trainer_paused) + " of alone (" +
                         fmt("%.0f", s.plain_tps_trainer_running) + " vs " + fmt("%.0f", s.plain_tps_trainer_paused) +
                         " tokens/s)"
                   : ""));
  t.push_back("speculative (online) vs plain: generation " + fmt("%.2fx", s.gen_speedup) + ", whole RL step " +
              fmt("%.2fx", s.step_speedup) + " (generation is " + fmt("%.0f%%", 100 * s.gen_share) +
              " of the online step)");
  t.push_back("online run's accepted drafts per round: drafter " + fmt("%.2f", s.accepted_per_round[0]) +
              ", suffix drafts from siblings " + fmt("%.2f", s.accepted_per_round[1]) + ", from recent completions " +
              fmt("%.2f", s.accepted_per_round[2]));
  if (s.full_batch > 0)
    t.push_back("at batch " + std::to_string(s.full_batch) + " on all cores (final requests): plain " +
                fmt("%.0f", s.full_batch_plain_tps) + " tokens/s, speculative " + fmt("%.0f", s.full_batch_online_tps) +
                " tokens/s (" + fmt("%.2fx", s.full_batch_plain_tps > 0 ? s.full_batch_online_tps / s.full_batch_plain_tps : 0.0) + ")");
  t.push_back("reward: first quarter " + fmt("%.3f", s.reward_first) + ", last quarter " + fmt("%.3f", s.reward_last));
  t.push_back("drafters promoted " + std::to_string(s.promotions) + ", swaps " + std::to_string(s.drafter_swaps) +
              ", policy swaps " + std::to_string(s.policy_swaps) + ", rejected " + std::to_string(s.rejected) +
              ", rollbacks " + std::to_string(s.rollbacks) + ", records stored " + std::to_string(s.records_stored));
  return t;
}

}  // namespace updraft::demo
