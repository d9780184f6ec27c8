#include "drafter/proposer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"

namespace updraft {

void top_draft_tokens(const DraftModel& model, const Tensor& logits, int64_t k, std::vector<int32_t>& tokens,
                      std::vector<float>& logprobs) {
  const int64_t R = logits.size(0);
  const Device d = logits.device();
  Tensor val = Tensor::empty({R, k}, DType::F32, d), idx = Tensor::empty({R, k}, DType::I32, d);
  ops::top_log_softmax(logits, k, val, idx);
  logprobs = val.to_f32_vector();
  tokens = idx.to(Device::CPU).to_i32_vector();
  for (int32_t& t : tokens)
    t = model.vocab().to_target(t);
}

namespace {

// A level's draft forward inputs for the live sequences: one step per sequence (its frontier at
// RoPE position base + level - 2, each node attending to its ancestors-or-self among the
// sequence's scratch entries, which the frontier joins) and, per row, the row of the states that
// holds its parent's output (level 2: row b of h_last).
void level_inputs(const std::vector<TreeBuilder>& trees, const std::vector<ProposeSeq>& seqs,
                  const std::vector<int64_t>& base, const std::vector<int64_t>& live, int64_t level,
                  std::vector<std::vector<int32_t>>& scratch, const std::vector<std::vector<int32_t>>& state_row,
                  std::vector<SeqStep>& steps, std::vector<int32_t>& src) {
  steps.resize(live.size());
  for (size_t l = 0; l < live.size(); ++l) {
    const int64_t b = live[l];
    const TreeBuilder& tb = trees[b];
    const std::vector<int32_t>& fr = tb.frontier();
    const int64_t n = static_cast<int64_t>(fr.size());
    auto& sc = scratch[b];
    sc.insert(sc.end(), fr.begin(), fr.end());
    const int64_t w = static_cast<int64_t>(sc.size());
    SeqStep& st = steps[l];
    st.kv = seqs[b].kv;
    st.tree_mask = Tensor::zeros({n, w}, DType::Bool);
    uint8_t* m = st.tree_mask.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      const int32_t node = fr[i];
      st.tokens.push_back(tb.pool_token(node));
      st.positions.push_back(static_cast<int32_t>(base[b] + level - 2));
      st.logit_rows.push_back(static_cast<int32_t>(i));
      for (int32_t a = node; a >= 0; a = tb.pool_parent(a))
        for (int64_t j = 0; j < w; ++j)
          if (sc[j] == a)
            m[i * w + j] = 1;
      const int32_t par = tb.pool_parent(node);
      src.push_back(par < 0 ? static_cast<int32_t>(b) : state_row[b][static_cast<size_t>(par)]);
    }
  }
}

}  // namespace

std::vector<DraftTree> propose(const DraftModel& model, KvCache& cache, const std::vector<ProposeSeq>& seqs,
                               const Tensor& h_last, const Tensor& logits, const SpecSettings& s) {
  s.validate();
  const int64_t B = static_cast<int64_t>(seqs.size()), k = s.top_k, H = model.config().hidden_size;
  UPD_REQUIRE(k <= model.config().draft_vocab_size)
      << "speculation: top_k " << k << " exceeds the draft vocabulary " << model.config().draft_vocab_size;
  UPD_CHECK(h_last.dim() == 2 && h_last.size(0) == B && h_last.size(1) == H && logits.dim() == 2 &&
            logits.size(0) == B && logits.size(1) == model.config().draft_vocab_size)
      << "propose: h_last must be [B, H] and logits [B, Vd]";
  std::vector<TreeBuilder> trees;
  std::vector<int64_t> base(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    trees.emplace_back(seqs[b].root, s);
    base[b] = seqs[b].kv->length;
    UPD_CHECK(cache.blocks_needed(base[b] + s.scratch_entries()) <= static_cast<int64_t>(seqs[b].kv->blocks.size()))
        << "propose: sequence " << b << " needs " << base[b] + s.scratch_entries() << " draft KV entries reserved";
  }
  std::vector<int32_t> top;
  std::vector<float> lps;
  top_draft_tokens(model, logits, k, top, lps);
  for (int64_t b = 0; b < B; ++b)
    trees[b].expand({top.begin() + b * k, top.begin() + (b + 1) * k}, {lps.begin() + b * k, lps.begin() + (b + 1) * k});

  // Per sequence: the pool index of each scratch entry written so far, and where each expanded
  // pool entry's output state lives (its row in `states`; -1: the root, row b of h_last).
  std::vector<std::vector<int32_t>> scratch(static_cast<size_t>(B));
  std::vector<std::vector<int32_t>> state_row(static_cast<size_t>(B));
  Tensor states = h_last;
  const float stop = s.stop_below > 0 ? std::log(static_cast<float>(s.stop_below)) : -INFINITY;
  for (int64_t level = 2; level <= s.steps; ++level) {
    // The sequences still drafting: a chain whose drafts are jointly less likely than stop_below stops.
    std::vector<int64_t> live;
    for (int64_t b = 0; b < B; ++b)
      if (!(trees[b].pool_score(trees[b].frontier().front()) < stop))
        live.push_back(b);
    if (live.empty())
      break;
    std::vector<SeqStep> steps;
    std::vector<int32_t> src;
    level_inputs(trees, seqs, base, live, level, scratch, state_row, steps, src);
    const int64_t T = static_cast<int64_t>(src.size());
    std::vector<int32_t> dst(src.size());
    std::iota(dst.begin(), dst.end(), 0);
    Tensor hidden = Tensor::empty({T, H}, model.act_dtype(), model.device());
    ops::copy_rows(states, Tensor::from_i32(src, {T}), hidden, Tensor::from_i32(dst, {T}));
    DraftOut out = model.forward(cache, steps, hidden);
    top_draft_tokens(model, out.logits, k, top, lps);
    int64_t row = 0;
    for (const int64_t b : live) {
      const std::vector<int32_t> fr = trees[b].frontier();
      const int64_t n = static_cast<int64_t>(fr.size());
      for (int64_t i = 0; i < n; ++i) {
        const auto node = static_cast<size_t>(fr[i]);
        if (state_row[b].size() <= node)
          state_row[b].resize(node + 1, -1);
        state_row[b][node] = static_cast<int32_t>(row + i);
      }
      trees[b].expand({top.begin() + row * k, top.begin() + (row + n) * k},
                      {lps.begin() + row * k, lps.begin() + (row + n) * k});
      row += n;
    }
    states = out.state;  // this level's rows; a stopped sequence's nodes are never expanded again
  }
  std::vector<DraftTree> result;
  for (int64_t b = 0; b < B; ++b) {
    cache.truncate(*seqs[b].kv, base[b]);
    result.push_back(trees[b].finish());
  }
  return result;
}

}  // namespace updraft
