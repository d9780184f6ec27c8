// Wiring shared by the roles that run rollout workers (`updraft serve`, `updraft demo`): a
// worker's weight-link follower and its rollback scorer (the trainer's teacher-forced
// evaluation, injected so that rollout/ does not depend on trainer/).
#pragma once

#include <memory>

#include "messaging/weight_link.h"
#include "rollout/worker/worker.h"

namespace updraft {

// Estimated chain acceptance of a drafter on captured completions, teacher-forced
// (trainer/draft_train.h; bf16 products where the CPU has AMX): what confirms a worker's rollback
// alarm on the same completions.
DrafterScorer teacher_forced_scorer();

// Follows a weight link for `worker`: every version announced (and delivered: read in place or
// fetched as verified chunks) is offered to the worker's hot-swap path, which validates it; a
// rejection is logged and counted by the worker. opts.on_version is set here.
std::unique_ptr<messaging::WeightSubscriber> follow_weight_link(Worker& worker,
                                                                messaging::WeightSubscriberOptions opts);

}  // namespace updraft
