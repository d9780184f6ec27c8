#include <spdlog/spdlog.h>

#include <thread>

#include "app/demo/demo_run.h"
#include "kernels/core/cpu_team.h"
#include "kernels/core/error.h"
#include "kernels/io/weight_version.h"
#include "trainer/grpo.h"

namespace updraft::demo {

namespace {

// Requests a worker takes at a time (run_phase): the fewest whole groups that fill its engine's
// batch (a batch of 6 and groups of 4: two groups, so that six decode at once); 0 (a fixed split)
// where it decodes its whole share at once.
size_t pull_of(int64_t worker_batch, size_t group) {
  const auto g = static_cast<int64_t>(group);
  return worker_batch == 0 ? 0 : group * static_cast<size_t>((worker_batch + g - 1) / g);
}

}  // namespace

// The three runs of the step's requests on one policy version (the trainer paused), in an order
// that rotates every step so that no mode always runs first after the update (cold caches).
void DemoRun::generate(int64_t s, const std::vector<GenRequest>& reqs, StepRecord& rec, Phase& online, Phase& plain) {
  const double record_s0 = record_seconds(workers_);
  Phase frozen;
  const GenMode modes[3] = {GenMode::kServing, GenMode::kReference, GenMode::kPlain};
  Phase* phases[3] = {&online, &frozen, &plain};
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t m = (k + s) % 3;
    *phases[m] = run_phase(workers_, reqs, modes[m], static_cast<size_t>(o_.group),
                           pull_of(o_.worker_batch, static_cast<size_t>(o_.group)));
  }
  // The online drafter's acceptance at the full settings, as the frozen one's is measured (the
  // adaptive depths of the online run change where rounds start): every fourth request again.
  std::vector<GenRequest> every4;
  for (size_t i = 0; i < reqs.size(); i += 4)
    every4.push_back(reqs[i]);
  const Phase full = run_phase(workers_, every4, GenMode::kFull, 1, pull_of(o_.worker_batch, 1));
  rec.policy_version = online.batches[0].policy_version;
  rec.drafter_version = online.drafter_version;
  rec.domain = s < schedule_.switch_step ? schedule_.first_name : schedule_.second_name;
  rec.tau_online = full.spec.tau();  // full settings, comparable with tau_frozen
  int64_t speculated = 0;
  double depth_sum = 0;
  for (const BatchReport& b : online.batches) {
    speculated += b.speculated;
    depth_sum += b.mean_depth * static_cast<double>(b.completions.size());
  }
  rec.spec_share = static_cast<double>(speculated) / static_cast<double>(reqs.size());
  rec.mean_depth = depth_sum / static_cast<double>(reqs.size());
  SpecStats frozen_subset;  // the frozen drafter on the same requests as the online one's tau
  for (size_t i = 0; i < reqs.size(); i += 4)
    frozen_subset.merge(frozen.ordered[i]->result.spec);
  rec.tau_frozen = frozen_subset.tau();
  rec.rounds_online = online.spec.rounds;
  for (size_t k = 0; k < rec.accepted_by.size(); ++k)
    rec.accepted_by[k] = online.spec.accepted_by[k];
  rec.gen_online_s = online.seconds;
  rec.stall_steps_online = online.stall_steps;
  rec.stall_s_online = online.stall_seconds;
  rec.gen_frozen_s = frozen.seconds;
  rec.gen_plain_s = plain.seconds;
  rec.rollout_cpu_s = online.cpu_seconds;
  rec.tokens_online = online.tokens;
  rec.tokens_plain = plain.tokens;
  rec.tps_online = online.tokens / online.seconds;
  rec.tps_frozen = frozen.tokens / frozen.seconds;
  rec.tps_plain = plain.tokens / plain.seconds;
  rec.capture_s = record_seconds(workers_) - record_s0;
}

// Rewards and the GRPO update on `rollouts` (the plain run's: demo.h), then policy v+1 is
// published and announced, and every worker has it staged before the step ends.
void DemoRun::update_policy(StepRecord& rec, const std::vector<corpus::Sample>& samples, const Phase& rollouts) {
  std::vector<train::GrpoSample> gs;
  int64_t formatted = 0;
  const size_t n = rollouts.ordered.size();
  for (size_t i = 0; i < n; ++i) {
    const GenResult& g = rollouts.ordered[i]->result;
    const size_t prompt_index = i / static_cast<size_t>(o_.group);
    const double r = corpus::reward(samples[prompt_index], tok_.decode(g.tokens, true));
    formatted += r > 0;
    rec.reward += r;
    gs.push_back({g.prompt, g.tokens, r, static_cast<int64_t>(prompt_index)});
  }
  rec.reward /= static_cast<double>(n);
  rec.format_rate = static_cast<double>(formatted) / static_cast<double>(n);
  const auto t_up = Clock::now();
  const train::GrpoStats st = train::grpo_step(master_, *opt_, gs, o_.rl_lr);
  rec.grad_norm = st.grad_norm;
  rec.nll = st.mean_nll;
  const uint64_t next_version = rec.policy_version + 1;
  const WeightVersion pv = publish_version(versions_.string(), "policy", next_version,
                                           [&](const std::string& d) { master_.save_hf(d, DType::BF16); },
                                           {{"rl_step", rec.step}, {"mean_reward", rec.reward}});
  weights_->announce(pv.dir, messaging::WeightKind::kPolicy,
                     {{"rl_step", static_cast<double>(rec.step)}, {"mean_reward", rec.reward}});
  for (const auto& sub : subscribers_)
    UPD_REQUIRE(sub->wait_delivered(messaging::WeightKind::kPolicy, next_version, std::chrono::seconds(60)))
        << "demo: a worker did not receive policy v" << next_version << " (" << sub->stats().last_failure << ")";
  policy_ = std::make_shared<const PolicyModel>(PolicyModel::load(pv.dir));
  policy_dir_ = pv.dir;
  trainer_->notify_policy(policy_, next_version);
  rec.update_s = since(t_up);
  if (next_version >= 4)  // workers and trainer hold what they serve; old files can go
    fs::remove_all(versions_ / version_dir_name("policy", next_version - 3));
  for (auto& snd : senders_)
    snd->flush(std::chrono::milliseconds(10000));
  rec.records_acked = static_cast<int64_t>(server_->metrics().records_stored.load());
}

// The trainer's slot (demo.h): until it is idle or has used its share of the step's compute,
// trainer_share × the online generation's CPU seconds (the process's CPU clock: the workers are
// idle meanwhile, so it counts the trainer's threads). A budget in CPU seconds rather than wall
// time gives the trainer the same compute whatever else the machine runs. Rounds that ended in
// the slot join the learning curve.
void DemoRun::trainer_slot(StepRecord& rec) {
  const size_t rounds_before = trainer_->reports().size();
  const double cpu0 = process_cpu_seconds();
  release_cpu_team();  // this thread only waits now: its CPU team must not slow the trainer's
  trainer_->set_paused(false);
  const auto t_slot = Clock::now();
  const double budget = o_.trainer_share * rec.rollout_cpu_s;
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * to_.poll_ms));  // let a due trigger fire
  while (process_cpu_seconds() - cpu0 < budget && !trainer_->idle())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  trainer_->set_paused(true);
  rec.trainer_slot_s = since(t_slot);
  rec.trainer_cpu_s = process_cpu_seconds() - cpu0;
  const std::vector<train::RoundReport> reports = trainer_->reports();
  for (size_t i = rounds_before; i < reports.size(); ++i) {
    const train::RoundReport& r = reports[i];
    optimizer_steps_ += r.samples / o_.trainer_samples;
    curve_.push_back({r.round, rec.step, optimizer_steps_,
                      static_cast<int64_t>(server_->metrics().records_stored.load()), r.candidate_tau, r.serving_tau,
                      r.promoted});
  }
  std::lock_guard<std::mutex> lock(promoted_mu_);
  rec.promoted = promoted_now_;
  promoted_now_.clear();
}

StepRecord DemoRun::rl_step(int64_t s) {
  StepRecord rec;
  rec.step = s + 1;
  std::vector<corpus::Sample> samples;
  const std::vector<GenRequest> reqs =
      requests(s, static_cast<uint64_t>(s * o_.prompts_per_step), o_.prompts_per_step, &samples);
  Phase online, plain;
  generate(s, reqs, rec, online, plain);
  update_policy(rec, samples, plain);
  trainer_slot(rec);
  std::string promo;
  for (uint64_t v : rec.promoted)
    promo += " +drafter v" + std::to_string(v);
  spdlog::info(
      "demo: step {}/{} [{}]  policy v{}  reward {:.3f}  tau online {:.2f} (drafter v{}, {:.0f}% speculative, depth "
      "{:.1f}) vs frozen {:.2f}  tokens/s online {:.0f} frozen {:.0f} plain {:.0f}  speedup gen {:.2f}x step {:.2f}x  "
      "[update {:.1f} s, capture {:.1f} s, trainer {:.1f} s, {:.1f} CPU-s per rollout CPU-s; online stalls {} steps, "
      "{:.2f} s]{}",
      s + 1, o_.steps, rec.domain, rec.policy_version, rec.reward, rec.tau_online, rec.drafter_version,
      100 * rec.spec_share, rec.mean_depth, rec.tau_frozen, rec.tps_online, rec.tps_frozen, rec.tps_plain,
      rec.gen_speedup(), rec.step_speedup(), rec.update_s, rec.capture_s, rec.trainer_slot_s,
      rec.rollout_cpu_s > 0 ? rec.trainer_cpu_s / rec.rollout_cpu_s : 0.0, rec.stall_steps_online, rec.stall_s_online,
      promo);
  return rec;
}

}  // namespace updraft::demo
