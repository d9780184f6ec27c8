// A small policy, its versions and workers over it, shared by the worker tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app/worker_role.h"
#include "rollout/worker/worker.h"
#include "tests/trainer/online_fixture.h"

namespace updraft::testing_online {

struct WorkerFixture {
  TempDir dir{"worker"};
  train::TrainableLlama m = make_policy(4);
  WeightVersion p1 = publish_policy(m, dir.str() + "/v", 1);
  std::shared_ptr<const PolicyModel> policy = std::make_shared<const PolicyModel>(PolicyModel::load(p1.dir));
  std::vector<std::vector<int32_t>> ps = prompts(4, 7);

  WeightVersion publish_draft(const DraftModel& d, uint64_t v) {
    return publish_version(dir.str() + "/v", "drafter", v, [&](const std::string& x) { d.save(x); });
  }
  WorkerOptions options(int64_t rollback_rounds = 1 << 30) const {
    WorkerOptions o;
    o.id = 1;
    o.engine.spec = SpecSettings{4, 1, 5};
    o.engine.kv_cache_bytes = int64_t{32} << 20;
    o.rollback_rounds = rollback_rounds;
    o.rollback_margin = 0.1;
    o.scorer = teacher_forced_scorer();
    o.rollback_wait_seconds = 1;  // an idle-priority confirmation starved by a busy machine (ctest -j)
    o.probe_every = 0;  // without adaptive speculation every round is at the full settings anyway
    return o;
  }
  std::unique_ptr<Worker> worker(std::shared_ptr<const DraftModel> d, std::shared_ptr<messaging::RecordSender> s = {},
                                 int64_t rollback_rounds = 1 << 30) {
    return std::make_unique<Worker>(options(rollback_rounds), policy, 1, std::move(d), 1, std::move(s));
  }
};

}  // namespace updraft::testing_online
