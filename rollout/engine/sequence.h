// One request's state inside the engine (rollout/engine/engine.h), from submit() until it
// finishes: its request, its blocks in the policy's and the drafter's KV caches, what it has
// emitted, and the committed pairs the drafter has not absorbed yet.
//
// Positions. The context is prompt + output tokens. The policy's cache holds kv.length entries;
// the pending token (the last output token) has none yet. prefill_target() is what must be in
// the cache before the sequence decodes: the prompt for a new sequence, the prompt and all but
// the last output token for one recomputing after a preemption. While kv.length is below it the
// sequence is prefilling (in chunks).
//
// Drafter pairs. Pair p is (the policy's aux state at position p, the token at p + 1). The draft
// cache holds pairs [0, dkv.length); pairs [dkv.length, dkv.length + pending_tokens.size()) wait
// in pending_aux / pending_tokens (their aux rows copied out of the step that computed them) until
// the speculator absorbs them. After every step, dkv.length + pending == kv.length for a sequence
// that speculates (every committed position's pair is known once the next token is).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "drafter/draft_tree.h"
#include "kernels/nn/kv_cache.h"
#include "rollout/engine/request.h"

namespace updraft {

struct Seq {
  uint64_t id = 0;
  GenRequest req;
  uint64_t seed = 0;
  bool spec = false;  // speculates (the engine has a drafter and the request did not opt out)
  bool abort_requested = false;
  SeqKv kv, dkv;  // policy and draft caches
  GenResult result;
  DraftTree tree;       // the tree this step verifies (root = pending token); empty between steps
  DraftTree last_tree;  // the most recent tree verified with drafts (for inspection)
  std::vector<Tensor> pending_aux;      // chunks of [n_i, A*H] rows, in position order
  std::vector<int32_t> pending_tokens;  // one per pending pair
  std::vector<float> cap_aux;           // capture: aux rows of positions [0, cap_rows), f32
  Tensor kept_cap_aux;  // a kept prefix donor's captured rows instead, bf16 (prefix_reuse.h)
  int64_t cap_rows = 0;

  int64_t prompt_len() const { return static_cast<int64_t>(req.prompt.size()); }
  int64_t out_len() const { return static_cast<int64_t>(result.tokens.size()); }
  int64_t prefill_target() const { return prompt_len() + std::max<int64_t>(0, out_len() - 1); }
  bool prefilling() const { return kv.length < prefill_target(); }
  bool finished() const { return !result.finish_reason.empty(); }
  int32_t token_at(int64_t pos) const {
    return pos < prompt_len() ? req.prompt[static_cast<size_t>(pos)]
                              : result.tokens[static_cast<size_t>(pos - prompt_len())];
  }
  int32_t pending_token() const { return result.tokens.back(); }
  // The prompt token at pos needs its input logprob (asked for, and not recorded yet).
  bool wants_input_logprob(int64_t pos) const {
    const int64_t from = req.input_logprobs_from;
    return from >= 0 && pos >= std::max<int64_t>(1, from) && pos < prompt_len() &&
           std::isnan(result.input_logprobs[static_cast<size_t>(pos - from)]);
  }
  int64_t pending() const { return static_cast<int64_t>(pending_tokens.size()); }
  void drop_pending() {
    pending_aux.clear();
    pending_tokens.clear();
  }
};

}  // namespace updraft
