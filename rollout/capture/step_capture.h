// Capture inside the engine (GenRequest::capture): the drafter's training data gathered from the
// forwards generation runs anyway, no extra pass. For every captured request: the policy's aux
// hidden states at every position of prompt + output ([n, A*H], bf16 in the result; the final
// position's row, which no training pair reads, is zero) and, for every output token, the top-k
// log-probabilities of the unscaled policy distribution at the position that produced it (the
// teacher of trainer/ttt_data.h). After a preemption the recomputed positions are not captured
// twice (rows are kept by position), and no teacher row is lost (tokens are emitted once).
#pragma once

#include <cstdint>
#include <vector>

#include "rollout/engine/commit.h"

namespace updraft {

// Appends, for every captured entry of the step, the teacher rows of its emitted tokens and the
// aux rows of its newly committed positions. Returns the seconds it took.
double capture_step(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run,
                    int64_t teacher_k);

// A finished captured request: result.aux = its rows as [prompt + tokens, W] bf16 (rows past the
// end dropped, missing final rows zero). Checks one teacher row per output token.
void finish_capture(Seq& s, int64_t aux_width);

}  // namespace updraft
