// `updraft train` without --once: the online trainer as its own process (docs/online.md,
// "Running the roles as processes").
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "app/train_cmd.h"
#include "kernels/core/cpu_team.h"
#include "kernels/core/stop_signals.h"
#include "messaging/curve_keys.h"
#include "messaging/metrics.h"
#include "messaging/record_store.h"
#include "messaging/weight_link.h"
#include "trainer/online/online_trainer.h"

namespace updraft {
namespace {

// The trainer's metrics (design.md §12): its rounds and promotions, the last round's loss and
// acceptance estimates, the serving drafter, and the consumer lag: records in its view of the
// buffer newer than the newest it has trained on (the buffer's own gauge knows only a trainer
// that shares its process).
std::string trainer_metrics(const train::OnlineTrainer& t, const messaging::RecordStore& store) {
  const auto reports = t.reports();
  int64_t promoted = 0;
  for (const auto& r : reports)
    promoted += r.promoted ? 1 : 0;
  std::ostringstream os;
  using messaging::prometheus_series;
  prometheus_series(os, "updraft_trainer_rounds_total", "counter", "Training rounds finished", "",
                    static_cast<double>(reports.size()));
  prometheus_series(os, "updraft_trainer_promotions_total", "counter", "Drafter versions promoted", "",
                    static_cast<double>(promoted));
  prometheus_series(os, "updraft_trainer_serving_drafter_version", "gauge", "Newest promoted drafter version", "",
                    static_cast<double>(t.serving_version()));
  prometheus_series(os, "updraft_trainer_quarantined_records", "gauge",
                    "Buffer records the trainer could not use, skipped for good (quarantine.tsv in its directory)", "",
                    static_cast<double>(t.quarantined()));
  prometheus_series(os, "updraft_trainer_consumer_lag_records", "gauge",
                    "Buffer records newer than the newest the trainer has trained on", "",
                    static_cast<double>(store.consumer_lag()));
  if (!reports.empty()) {
    const auto& r = reports.back();
    prometheus_series(os, "updraft_trainer_loss", "gauge", "Mean training loss of the last round", "", r.loss);
    prometheus_series(os, "updraft_trainer_candidate_tau", "gauge", "Held-out tau estimate of the last candidate", "",
                      r.candidate_tau);
    prometheus_series(os, "updraft_trainer_serving_tau", "gauge", "Held-out tau estimate of the serving drafter", "",
                      r.serving_tau);
  }
  return os.str();
}

}  // namespace

int run_train_online(const TrainArgs& a) {
  // Handlers first: a SIGTERM during startup (loading, resuming) still stops cleanly.
  const StopSignals signals;
  const OnlineTrainArgs& on = a.online;
  UPD_REQUIRE(!on.buffer.empty()) << "train: the online trainer needs --buffer (or use --once for offline training)";
  UPD_REQUIRE(!on.drafter.empty()) << "train: the online trainer needs --drafter, the initial serving drafter";
  UPD_REQUIRE(on.policy_pub.empty() == on.policy_req.empty()) << "train: give both --policy-pub and --policy-req";
  UPD_REQUIRE(on.announce_pub.empty() == on.announce_req.empty())
      << "train: give both --announce-pub and --announce-req";
  UPD_REQUIRE((on.curve_allow_file.empty() && on.policy_curve_server_file.empty()) || !on.curve_key_file.empty())
      << "train: --curve-allow and --policy-curve-server need --curve-key";
  UPD_REQUIRE(on.curve_allow_file.empty() || !on.announce_pub.empty()) << "train: --curve-allow needs --announce-pub";
  UPD_REQUIRE(on.policy_curve_server_file.empty() || !on.policy_pub.empty())
      << "train: --policy-curve-server needs --policy-pub";
  UPD_REQUIRE(on.steps_per_round > 0 && on.window_records > 0 && on.window_versions > 0)
      << "train: --steps-per-round, --window-records and --window-versions must be positive";
  UPD_REQUIRE(std::filesystem::is_directory(on.buffer))
      << "train: --buffer " << on.buffer << " is not a directory (start `updraft buffer --path " << on.buffer
      << "` first)";
  namespace fs = std::filesystem;
  fs::create_directories(a.once_opts.out_dir);

  // The buffer's store, read-only beside the process that writes it.
  const std::string secondary = (fs::path(a.once_opts.out_dir) / "buffer-secondary").string();
  std::shared_ptr<messaging::RecordStore> store = messaging::RecordStore::open_secondary(on.buffer, secondary);
  auto policy = std::make_shared<const PolicyModel>(PolicyModel::load(a.once_opts.model_dir));
  const DraftModel initial = DraftModel::load(on.drafter, policy->draft_target());
  policy->check_aux_layers(initial.aux_layers());
  spdlog::info("train: online trainer on buffer {} ({} records), policy {} (v{}), drafter {} (v{})", on.buffer,
               store->stats().records, a.once_opts.model_dir, on.policy_version, on.drafter, on.drafter_version);

  std::unique_ptr<messaging::WeightPublisher> announcer;
  if (!on.announce_pub.empty()) {
    messaging::WeightPublisherOptions wpo;
    wpo.pub_endpoint = on.announce_pub;
    wpo.request_endpoint = on.announce_req;
    if (!on.curve_allow_file.empty())
      wpo.curve = messaging::curve_server_from_files(on.curve_key_file, on.curve_allow_file);
    announcer = std::make_unique<messaging::WeightPublisher>(wpo);
    spdlog::info("train: announcing drafters on {} (requests on {})", announcer->pub_endpoint(),
                 announcer->request_endpoint());
  }

  train::OnlineTrainerOptions to;
  to.dir = a.once_opts.out_dir;
  to.window_versions = on.window_versions;
  to.window_records = on.window_records;
  to.newest_share = on.newest_share;
  to.eval_records = on.eval_records;
  to.steps_per_round = on.steps_per_round;
  to.idle_rounds = on.idle_rounds;
  to.round_decay = train::lr_decay_from_name(on.lr_decay);
  to.round_min_lr_ratio = on.min_lr_ratio;
  to.fresh_optimizer_each_round = on.fresh_optimizer;
  to.samples_per_step = a.once_opts.train.samples_per_step;
  to.lr = a.lr > 0 ? a.lr : 3e-4;
  to.ttt = a.once_opts.train.ttt;
  to.min_new_records = on.min_new_records;
  to.min_new_tokens = on.min_new_tokens;
  to.tau_floor = on.tau_floor;
  to.promote_margin = on.promote_margin;
  to.seed = a.once_opts.seed;
  to.progress = [](const std::string& line) { spdlog::info("train: {}", line); };
  to.on_promote = [&](const WeightVersion& v) {
    spdlog::info("train: published drafter v{} at {}", v.version, v.dir);
    if (announcer)
      announcer->announce(v.dir, messaging::WeightKind::kDrafter,
                          {{"heldout_tau_estimate", v.meta.value("heldout_tau_estimate", 0.0)}});
  };
  train::OnlineTrainer trainer(to, store, policy, on.policy_version, initial, on.drafter_version);
  if (trainer.resumed())
    spdlog::info("train: resumed from {}/trainer, serving drafter v{}", to.dir, trainer.serving_version());

  // New policy versions (an RL loop's announcements) rebind the trainer; the files are read
  // where announced (shared filesystem) or fetched as chunks into <out>/policy-versions.
  std::unique_ptr<messaging::WeightSubscriber> follower;
  if (!on.policy_pub.empty()) {
    messaging::WeightSubscriberOptions wso;
    wso.pub_endpoint = on.policy_pub;
    wso.request_endpoint = on.policy_req;
    if (!on.policy_curve_server_file.empty())
      wso.curve = messaging::curve_client_from_files(on.curve_key_file, on.policy_curve_server_file);
    wso.kinds = {messaging::WeightKind::kPolicy};
    wso.min_version[static_cast<int>(messaging::WeightKind::kPolicy)] = on.policy_version;
    wso.local_root = (fs::path(a.once_opts.out_dir) / "policy-versions").string();
    wso.on_version = [&trainer, &policy, &initial](messaging::WeightKind, uint64_t version, const std::string& dir) {
      try {
        auto next = std::make_shared<const PolicyModel>(PolicyModel::load(dir));
        check_successor(next->config(), policy->config());  // refused here, not in every later round
        next->check_aux_layers(initial.aux_layers());
        trainer.notify_policy(std::move(next), version);
        spdlog::info("train: following policy v{} ({})", version, dir);
      } catch (const std::exception& e) {
        spdlog::error("train: policy v{} at {} not taken: {}", version, dir, e.what());
      }
    };
    follower = std::make_unique<messaging::WeightSubscriber>(wso);
  }

  trainer.start();
  release_cpu_team();  // this thread only waits from here: its CPU team must not slow the trainer's
  auto last_report = std::chrono::steady_clock::now();
  while (!signals.requested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (on.max_rounds > 0 && static_cast<int64_t>(trainer.reports().size()) >= on.max_rounds)
      break;
    const auto now = std::chrono::steady_clock::now();
    if (!on.metrics_file.empty() && now - last_report >= std::chrono::duration<double>(on.report_seconds)) {
      last_report = now;
      messaging::write_metrics_file(on.metrics_file, trainer_metrics(trainer, *store));
    }
  }
  trainer.stop();  // finishes the round in progress; its checkpoint is written
  if (!on.metrics_file.empty())
    messaging::write_metrics_file(on.metrics_file, trainer_metrics(trainer, *store));
  follower.reset();
  const auto reports = trainer.reports();
  int64_t promoted = 0;
  for (const auto& r : reports)
    promoted += r.promoted ? 1 : 0;
  spdlog::info("train: stopped{}: {} rounds, {} drafters promoted, serving drafter v{}",
               signals.requested() ? " by signal" : "", reports.size(), promoted, trainer.serving_version());
  return 0;
}

}  // namespace updraft
