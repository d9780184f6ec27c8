#include "rollout/engine/model_runner.h"

#include <chrono>

#include "kernels/core/error.h"
#include "kernels/ops.h"
#include "rollout/engine/logit_process.h"

namespace updraft {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The entry's rows: a context chunk (with the last prompt row's logits when it completes a new
// sequence's prompt), or its tree.
SeqStep entry_step(const StepEntry& e, EntryRows* r) {
  Seq& s = *e.seq;
  SeqStep st;
  st.kv = &s.kv;
  if (e.prefill > 0) {
    for (int64_t p = s.kv.length; p < s.kv.length + e.prefill; ++p) {
      st.tokens.push_back(s.token_at(p));
      if (s.wants_input_logprob(p + 1)) {  // row p predicts prompt token p + 1
        if (r->inputs++ == 0)
          r->input_pos = p + 1;
        st.logit_rows.push_back(static_cast<int32_t>(p - s.kv.length));
      }
    }
    if (s.out_len() == 0 && s.kv.length + e.prefill == s.prompt_len())
      st.logit_rows.push_back(static_cast<int32_t>(e.prefill - 1));
    return st;
  }
  if (s.tree.tokens.empty())
    s.tree = DraftTree::single(s.pending_token());
  const int64_t n = s.tree.size();
  st.tokens = s.tree.tokens;
  for (int64_t i = 0; i < n; ++i) {
    st.positions.push_back(static_cast<int32_t>(s.kv.length + s.tree.depth[i]));
    st.logit_rows.push_back(static_cast<int32_t>(i));
  }
  if (n > 1)
    st.tree_mask = s.tree.mask();
  return st;
}

// Applies the logit processors of the entries that have them to their host rows; whether any did.
bool process_rows(const StepPlan& plan, RunOut& out, int64_t V, const std::vector<int32_t>& eos) {
  bool any = false;
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    const Seq& s = *plan.entries[e].seq;
    const EntryRows& at = out.at[e];
    if (at.logits == 0 || !needs_logit_processing(s.req.params))
      continue;
    const bool decode = plan.entries[e].prefill == 0;
    const DraftTree tree = decode ? s.tree : DraftTree::single(s.token_at(at.cached + at.rows - 1));
    UPD_CHECK(tree.size() == at.logits) << "process_rows: tree of " << tree.size() << " nodes, " << at.logits << " rows";
    process_logits(s, tree, out.host_logits.data<float>() + at.first_logit * V, V, eos);
    any = true;
  }
  return any;
}

}  // namespace

RunOut run_policy(const PolicyModel& model, KvCache& cache, const StepPlan& plan, const RunOptions& opts) {
  RunOut out;
  std::vector<SeqStep> batch;
  std::vector<float> temp, top_p;
  std::vector<int32_t> top_k;
  bool any_greedy = false, any_sampled = false;
  int64_t logit_rows = 0;
  for (const StepEntry& e : plan.entries) {
    EntryRows r;
    batch.push_back(entry_step(e, &r));
    const SeqStep& st = batch.back();
    r.first_row = out.rows;
    r.rows = static_cast<int64_t>(st.tokens.size());
    r.cached = e.seq->kv.length;
    r.first_input = logit_rows;
    r.first_logit = logit_rows + r.inputs;
    r.logits = static_cast<int64_t>(st.logit_rows.size()) - r.inputs;
    out.rows += r.rows;
    out.prefill_rows += e.prefill;
    logit_rows += r.inputs + r.logits;
    const SamplingParams& p = e.seq->req.params;
    for (int64_t i = 0; i < r.inputs + r.logits; ++i) {
      temp.push_back(p.temperature);
      top_k.push_back(p.top_k);
      top_p.push_back(p.top_p);
    }
    if (r.logits > 0)
      (p.temperature == 0 ? any_greedy : any_sampled) = true;
    out.at.push_back(r);
  }
  ForwardOptions fopts;
  fopts.profile = opts.profile;
  fopts.aux = opts.aux;
  if (opts.aux)
    fopts.aux_layers = opts.aux_layers;
  const auto t0 = Clock::now();
  out.fo = model.forward(cache, batch, fopts);
  out.forward_seconds = seconds_since(t0);
  const int64_t R = logit_rows, V = model.config().vocab_size;
  if (R == 0)
    return out;
  UPD_CHECK(out.fo.logits.size(0) == R) << "run_policy: " << out.fo.logits.size(0) << " logit rows, expected " << R;
  const Device d = model.device();
  out.host_logits = out.fo.logits.to(Device::CPU);
  if (process_rows(plan, out, V, opts.eos_token_ids))
    out.fo.logits = out.host_logits.to(d);
  if (any_greedy || opts.capture) {
    const auto t1 = Clock::now();
    out.logp = Tensor::empty({R, V}, DType::F32, d);
    ops::log_softmax(out.fo.logits, out.logp);
    if (any_greedy)
      out.host_logp = out.logp.to(Device::CPU);
    else
      out.logp_only_for_capture_seconds = seconds_since(t1);
  }
  if (any_sampled) {
    Tensor probs = Tensor::empty({R, V}, DType::F32, d);
    ops::sampling_probs(out.fo.logits, Tensor::from_f32(temp, {R}).to(d), Tensor::from_i32(top_k, {R}).to(d),
                        Tensor::from_f32(top_p, {R}).to(d), probs);
    out.host_probs = probs.to(Device::CPU);
  }
  return out;
}

}  // namespace updraft
