#include "app/worker_role.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "kernels/core/cpu_team.h"
#include "trainer/draft_train.h"
#include "trainer/ttt_linear.h"

namespace updraft {

DrafterScorer teacher_forced_scorer() {
  return [](const DraftModel& drafter, const PolicyModel& policy, const std::vector<TttSample>& samples,
            int64_t depth) {
    const train::InMemoryDataset data(samples);
    train::TttOptions to;
    to.steps = std::max<int64_t>(1, depth);
    // bf16 products where the CPU has AMX, as the trainer's own evaluation: f32 products made a
    // confirmation 3.9x slower (5.6 s for both drafters on 32 completions, one thread) for
    // estimates equal to within 0.001. It runs on a thread of its own at idle priority
    // (rollout/worker/confirmation.h), where the engine's idle time is all it gets.
    to.matmul = train::auto_ttt_matmul();
    return train::estimated_chain_tau(
        train::evaluate_drafter(train::TrainableDraft(drafter, policy.draft_target()), data, to));
  };
}

std::unique_ptr<messaging::WeightSubscriber> follow_weight_link(Worker& worker,
                                                                messaging::WeightSubscriberOptions opts) {
  opts.on_version = [&worker](messaging::WeightKind kind, uint64_t version, const std::string& dir) {
    const bool policy = kind == messaging::WeightKind::kPolicy;
    std::string why;
    if (policy ? worker.offer_policy(dir, &why) : worker.offer_drafter(dir, &why))
      spdlog::info("worker: {} v{} staged from the weight link ({})", policy ? "policy" : "drafter", version, dir);
    release_cpu_team();  // loading may have started one; this thread now waits for the next version
  };
  return std::make_unique<messaging::WeightSubscriber>(std::move(opts));
}

}  // namespace updraft
