#include <spdlog/spdlog.h>

#include <atomic>
#include <exception>
#include <thread>

#include "app/demo/demo_run.h"
#include "app/demo/reference.h"
#include "kernels/io/atomic_file.h"
#include "kernels/io/weight_version.h"
#include "trainer/draft_train.h"
#include "trainer/ttt_model.h"

namespace updraft::demo {
namespace {

// The workers' plain decoding of `reqs`, alone and with the trainer's work (TTT steps of the
// online recipe on `data`, from `drafter`) running beside them: alone, beside, alone again.
void trainer_contention(std::vector<std::unique_ptr<Worker>>& workers, const std::vector<GenRequest>& reqs,
                        const DraftModel& drafter, const DraftTarget& target, const ReferenceData& data,
                        const train::OnlineTrainerOptions& to, Summary& sum) {
  const Phase alone1 = run_phase(workers, reqs, GenMode::kPlain, 1, 0);
  std::atomic<bool> done{false};
  std::atomic<int64_t> trained{0};
  std::exception_ptr error;
  std::thread trainer([&] {
    try {
      train::TrainableDraft copy(drafter, target);
      // The online trainer's step: its draws, depth, clipping and optimiser, no evaluation.
      train::AdamW opt(copy.params(), train::AdamWOptions{});
      for (size_t i = 0; !done.load(); ++i) {
        copy.params().zero_grad();
        for (int64_t j = 0; j < to.samples_per_step; ++j)
          copy.forward_backward(
              data.train[(i * static_cast<size_t>(to.samples_per_step) + static_cast<size_t>(j)) % data.train.size()],
              to.ttt, 1.0f / static_cast<float>(to.samples_per_step));
        train::clip_grad_norm(copy.params(), to.clip);
        opt.step(to.lr);
        ++trained;
      }
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the trainer is computing
  const int64_t trained0 = trained.load();
  const Phase beside = run_phase(workers, reqs, GenMode::kPlain, 1, 0);
  const int64_t trained_beside = trained.load() - trained0;
  done = true;
  trainer.join();
  if (error)
    std::rethrow_exception(error);
  const Phase alone2 = run_phase(workers, reqs, GenMode::kPlain, 1, 0);
  sum.plain_tps_trainer_paused = static_cast<double>(alone1.tokens + alone2.tokens) / (alone1.seconds + alone2.seconds);
  sum.plain_tps_trainer_running = static_cast<double>(beside.tokens) / beside.seconds;
  spdlog::info(
      "demo: workers' plain decoding: {:.0f} tokens/s alone, {:.0f} beside the trainer (which made {} "
      "optimiser steps in those {:.1f} s)",
      sum.plain_tps_trainer_paused, sum.plain_tps_trainer_running, trained_beside, beside.seconds);
}
// The quick reference's optimiser recipe: the online trainer's.
train::DraftTrainOptions online_recipe(const train::OnlineTrainerOptions& to) {
  train::DraftTrainOptions dto;
  dto.ttt = to.ttt;
  dto.samples_per_step = to.samples_per_step;
  dto.lr = to.lr;
  dto.clip = to.clip;
  dto.seed = to.seed;
  dto.eval_every = 0;
  return dto;
}

}  // namespace

// Drafters on the final policy, measured on the same held-out requests (RL prompts the run never
// saw): the online drafter as it ended, the frozen one, and the references (reference.h).
void DemoRun::final_compare(Summary& sum) {
  std::vector<corpus::Sample> final_samples;
  const std::vector<GenRequest> final_reqs =
      requests(o_.steps, static_cast<uint64_t>(o_.steps * o_.prompts_per_step), o_.final_prompts, &final_samples);
  const DraftTarget ft = policy_->draft_target();
  const WeightVersion online_v = latest_version(versions_.string(), "drafter");
  const DraftModel online_final = online_v.dir.empty() ? draft0_->rebind(ft) : DraftModel::load(online_v.dir, ft);
  const DraftModel frozen_final = draft0_->rebind(ft);
  EngineOptions meo = eo_;
  meo.max_batch = static_cast<int64_t>(final_reqs.size());
  meo.suffix.mode = SuffixMode::kOff;  // the drafters' tau alone; the full-batch throughput below serves as workers do
  EngineOptions feo = meo;
  feo.suffix = eo_.suffix;
  const Measured m_online = measure(*policy_, &online_final, final_reqs, meo);
  const Measured m_adaptive = measure(*policy_, &online_final, final_reqs, feo, o_.adaptive_spec);
  const Measured m_plain = measure(*policy_, nullptr, final_reqs, meo);
  sum.final_online_tau = m_online.spec.tau();
  sum.final_frozen_tau = measure(*policy_, &frozen_final, final_reqs, meo).spec.tau();
  sum.full_batch = meo.max_batch;
  sum.full_batch_online_tps = m_adaptive.tokens_per_s();
  sum.full_batch_plain_tps = m_plain.tokens_per_s();
  if (o_.reference == "off")
    return;
  ReferenceInputs in;
  in.policy = policy_.get();
  in.policy_dir = policy_dir_;
  in.tok = &tok_;
  in.mix = schedule_.at(o_.steps);
  in.engine = eo_;
  in.max_new_tokens = o_.max_new_tokens;
  in.seed = o_.seed;
  const ReferenceData data = reference_rollouts(in, draft0_->aux_layers(), o_.offline_prompts, 7);
  trainer_contention(workers_, final_reqs, online_final, ft, data, to_, sum);
  const ReferenceDrafter quick =
      train_quick_reference(in, data, *draft0_, std::max(o_.offline_steps, optimizer_steps_), online_recipe(to_));
  sum.final_quick_tau = measure(*policy_, quick.drafter.get(), final_reqs, meo).spec.tau();
  sum.vs_quick = sum.final_quick_tau > 0 ? sum.final_online_tau / sum.final_quick_tau : 0.0;
  if (o_.reference != "strong")
    return;
  StrongRecipe recipe;
  recipe.prompts = o_.strong_prompts;
  recipe.steps = o_.strong_steps;
  recipe.cache_dir =
      o_.reference_cache.empty() ? (fs::path(o_.out_dir) / "reference-cache").string() : o_.reference_cache;
  const std::string start = models_.converged_drafter.empty() ? models_.drafter : models_.converged_drafter;
  const ReferenceDrafter strong = train_strong_reference(in, start, recipe);
  sum.final_strong_tau = measure(*policy_, strong.drafter.get(), final_reqs, meo).spec.tau();
  sum.vs_strong = sum.final_strong_tau > 0 ? sum.final_online_tau / sum.final_strong_tau : 0.0;
  sum.strong_seconds = strong.seconds;
  sum.strong_cached = strong.cached;
  sum.strong_start = start;
}

void DemoRun::write_outputs(const std::vector<StepRecord>& steps, Summary& sum) {
  const nlohmann::json report = report_json(o_, eo_, models_.policy, models_.drafter, steps, curve_, sum);
  write_file_atomic((fs::path(o_.out_dir) / "report.json").string(), report.dump(2) + "\n");
  write_file_atomic((fs::path(o_.out_dir) / "tau.svg").string(),
                    render_svg(steps, sum, "updraft demo: acceptance length over RL steps (" + models_.name + ")"));
  spdlog::info("demo: summary ({} s)", static_cast<int64_t>(sum.seconds));
  for (const std::string& line : summary_table(sum))
    spdlog::info("  {}", line);
  spdlog::info("demo: report {}, plot {}", (fs::path(o_.out_dir) / "report.json").string(),
               (fs::path(o_.out_dir) / "tau.svg").string());
}

void DemoRun::close_weight_link() {
  const messaging::WeightPublisherStats ps = weights_->stats();
  uint64_t delivered = 0, fetched = 0, fetched_bytes = 0, failures = 0;
  for (const auto& sub : subscribers_) {
    const messaging::WeightSubscriberStats ss = sub->stats();
    delivered += ss.delivered;
    fetched += ss.fetched;
    fetched_bytes += ss.fetched_bytes;
    failures += ss.failures;
  }
  spdlog::info(
      "demo: weight link: {} versions announced, {} deliveries to {} workers ({} fetched as chunks, {:.1f} MB), {} "
      "failures",
      ps.announcements, delivered, subscribers_.size(), fetched, fetched_bytes / 1e6, failures);
  subscribers_.clear();  // the workers hold what they serve; the fetched copies can go
  for (size_t w = 0; w < workers_.size(); ++w)
    fs::remove_all(fs::path(o_.out_dir) / ("worker-" + std::to_string(w + 1) + "-weights"));
}

}  // namespace updraft::demo
