// Internal to the TTT trainer (ttt_model.cc): each step's teacher distribution and which rows
// each step must run.
#pragma once

#include <vector>

#include "drafter/vocab_map.h"
#include "kernels/core/tensor.h"
#include "trainer/ttt_data.h"

namespace updraft::train {

// Teacher of one step: dense draft-vocabulary probabilities, the rows that count, the target, and
// each counted row's weight in the loss.
struct StepTeacher {
  Tensor probs;               // f32 [T, Vd]
  std::vector<int32_t> top;   // draft id of the teacher's top-1, -1 when not counted
  std::vector<float> weight;  // [T]: 0 when not counted
  int64_t rows = 0;
  double weight_sum = 0;  // of the counted rows' weights
};

// Step k's teacher: row p predicts token p + 2 + k; it counts when that token is a response token
// and the teacher's top-1 lies in the draft vocabulary. A counted row weighs rejected_weight when
// its token's position is in s.rejected, else 1.
StepTeacher make_teacher(const TttSample& s, const VocabMap& vocab, int64_t k, double rejected_weight = 1.0);

// Which rows each step must run. Step 0 runs every row (later rows read its keys); a step k >= 1
// runs the rows from lo[k] on, the first row counted at step k or later (row p at step k reads
// only step-0 keys and its own keys of earlier steps, and feeds only itself at step k + 1, so a
// row that predicts nothing at k or after contributes nothing). The LM head and the loss run
// from head[k], the first row counted at step k. Without pruning every row runs everything.
struct RowPlan {
  std::vector<int64_t> lo, head;
  int64_t steps = 0;  // steps with any row to run
};

RowPlan plan_rows(const std::vector<StepTeacher>& teachers, int64_t T, bool prune);

}  // namespace updraft::train
