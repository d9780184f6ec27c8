// Converting between what the trainer trains on (TttSample) and what the buffer stores
// (messaging::RecordData): tokens, prompt length, aux states, teacher top-k and policy version
// carry over unchanged; the aux tensor keeps its dtype (bf16, f16 or f32) and its bytes.
#pragma once

#include <vector>

#include "messaging/record.h"
#include "drafter/draft_model.h"
#include "rollout/engine/request.h"
#include "rollout/policy_config.h"
#include "rollout/capture/sample.h"

namespace updraft {

// The record of a sample (worker, drafter version and rounds are the caller's to fill).
messaging::RecordData to_record(const TttSample& s);

// A completion's speculation rounds as the record's acceptance stats.
std::vector<messaging::RoundStats> round_stats(const std::vector<SpecRound>& rounds);

// The model an engine built with these options records from (what a worker's sender declares
// in its Hello, so the buffer refuses records inconsistent with it).
messaging::RecordModel record_model(const PolicyConfig& cfg, const EngineOptions& opts, const DraftModel* drafter);

// The sample of a record. Error when its aux tensor is not [tokens, width] or the teacher
// arrays do not match (records passed the buffer's validation, so this means a wrong policy).
TttSample to_sample(const messaging::RecordData& r);

}  // namespace updraft
