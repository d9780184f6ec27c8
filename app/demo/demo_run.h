// The demo's run (app/demo/demo.h) as one object, shared by its files: demo.cc (wiring, the run),
// demo_step.cc (one RL step), demo_final.cc (the final comparison and the outputs).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "app/demo/demo.h"
#include "app/demo/models.h"
#include "app/demo/phase.h"
#include "app/demo/report.h"
#include "messaging/buffer_server.h"
#include "messaging/record_sender.h"
#include "messaging/record_store.h"
#include "messaging/weight_link.h"
#include "messaging/zmq_util.h"
#include "rollout/tokenizer.h"
#include "trainer/adamw.h"
#include "trainer/corpus.h"
#include "trainer/llama_train.h"
#include "trainer/online/online_trainer.h"

namespace updraft::demo {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The RL prompts' domains: one mix for the whole run, or a two-stage curriculum "A>B" (stage A
// before switch_step, B from it on).
struct Schedule {
  corpus::Mix first, second;
  std::string first_name, second_name;
  int64_t switch_step = 0;  // 0-based step index of the first B step; == steps without a curriculum
  const corpus::Mix& at(int64_t step) const { return step < switch_step ? first : second; }
};

Schedule parse_schedule(const DemoOptions& o);

// One demo run: the roles wired together (demo.h), the RL steps, the final comparison.
class DemoRun {
 public:
  DemoRun(const DemoOptions& o, const std::string& buffer_dir);
  int run();

 private:
  std::vector<GenRequest> requests(int64_t step, uint64_t offset, int64_t prompts,
                                   std::vector<corpus::Sample>* samples) const;
  StepRecord rl_step(int64_t s);
  void generate(int64_t s, const std::vector<GenRequest>& reqs, StepRecord& rec, Phase& online, Phase& plain);
  void update_policy(StepRecord& rec, const std::vector<corpus::Sample>& samples, const Phase& rollouts);
  void trainer_slot(StepRecord& rec);
  void close_weight_link();
  void final_compare(Summary& sum);
  void write_outputs(const std::vector<StepRecord>& steps, Summary& sum);

  const DemoOptions& o_;
  const Clock::time_point t_start_ = Clock::now();
  const Models models_;
  const Tokenizer tok_;
  const Schedule schedule_;
  std::shared_ptr<const PolicyModel> policy0_, policy_;
  std::shared_ptr<const DraftModel> draft0_;
  std::string policy_dir_;
  train::TrainableLlama master_;
  std::unique_ptr<train::AdamW> opt_;
  fs::path versions_;
  std::shared_ptr<messaging::RecordStore> store_;
  messaging::ZmqContext zctx_;
  std::unique_ptr<messaging::BufferServer> server_;
  EngineOptions eo_;
  std::vector<std::shared_ptr<messaging::RecordSender>> senders_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<messaging::WeightPublisher> weights_;
  std::vector<std::unique_ptr<messaging::WeightSubscriber>> subscribers_;
  train::OnlineTrainerOptions to_;
  std::unique_ptr<train::OnlineTrainer> trainer_;
  std::mutex promoted_mu_;
  std::vector<uint64_t> promoted_now_;
  std::vector<TrainerPoint> curve_;
  int64_t optimizer_steps_ = 0;
};

}  // namespace updraft::demo
