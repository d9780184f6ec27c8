#include "drafter/proposer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"
#include "kernels/ops/sampling.h"

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

float draft_coin(uint64_t seed, uint64_t i) {
  return ops::uniform01(ops::mix64(seed ^ 0xbb67ae8584caa73bull), i);
}

namespace {

// One row of `fetch` top draft tokens (target ids, log-probabilities, best first) as a node's
// candidates: its best k, or for a sequence that samples (ps.temperature > 0) and `draw`s one
// token drawn with the coin u from q: the row's tokens at the sequence's temperature, filtered by
// its top_k and top_p as the policy's distribution is (ops::sampling_probs), renormalised. For a
// sequence that samples, q goes to the end of q_tok / q_prob (kSampledSupport entries, unused ones
// -1 and 0), drawn from or not.
void candidates(const ProposeSeq& ps, bool draw, const int32_t* tok, const float* lp, int64_t fetch, int64_t k, float u,
                std::vector<int32_t>& out_tok, std::vector<float>& out_lp, std::vector<int32_t>& q_tok,
                std::vector<float>& q_prob, float& confidence) {
  out_tok.assign(tok, tok + k);
  out_lp.assign(lp, lp + k);
  confidence += std::isnan(lp[0]) ? -INFINITY : lp[0];  // a NaN draft stops the chain
  if (ps.temperature <= 0)
    return;
  const int64_t n_max = ps.top_k > 0 ? std::min<int64_t>(fetch, ps.top_k) : fetch;
  std::vector<double> w(static_cast<size_t>(n_max));
  double total = 0;
  for (int64_t j = 0; j < n_max; ++j) {
    const double x = static_cast<double>(lp[j]) - lp[0];
    w[static_cast<size_t>(j)] = std::isfinite(x) ? std::exp(x / ps.temperature) : 0.0;
    total += w[static_cast<size_t>(j)];
  }
  int64_t n = n_max;  // top_p: the shortest prefix whose mass reaches it
  double cum = 0;
  for (int64_t j = 0; ps.top_p < 1 && j < n_max; ++j) {
    cum += w[static_cast<size_t>(j)];
    if (cum >= static_cast<double>(ps.top_p) * total) {
      n = j + 1;
      break;
    }
  }
  total = 0;
  for (int64_t j = 0; j < n; ++j)
    total += w[static_cast<size_t>(j)];
  if (!(total > 0) || !std::isfinite(total)) {  // degenerate logits: q is a point mass on the top token
    n = 1;
    w.assign(1, 1.0);
    total = 1.0;
  }
  for (int64_t j = 0; j < DraftTree::kSampledSupport; ++j) {
    q_tok.push_back(j < n ? tok[j] : -1);
    q_prob.push_back(j < n ? static_cast<float>(w[static_cast<size_t>(j)] / total) : 0.f);
  }
  if (!draw)
    return;
  int64_t pick = 0;
  for (double acc = 0; pick < n - 1; ++pick) {  // the first token whose cumulative mass exceeds u
    acc += w[static_cast<size_t>(pick)];
    if (acc > static_cast<double>(u) * total)
      break;
  }
  out_tok = {tok[pick]};
  out_lp = {static_cast<float>(std::log(w[static_cast<size_t>(pick)] / total))};
  confidence += static_cast<float>(std::log(w[0] / total)) - lp[0];  // q's top probability instead
}

// The candidates of each sequence's frontier nodes, level by level, from the rows of top draft
// tokens fetch() takes: the top k, or for a sampling chain one draw from q (candidates() above),
// its q rows kept for the tree (attach()). A chain stops on its confidence: the sum over its levels
// of the log of the drafter's top probability (for a greedy chain its drafts' joint
// log-probability; a sampling chain's draws are less likely than the top tokens, and stopping on
// them cut its chains short: the built-in pair at temperature 1 then verified fewer tokens than
// the top tokens' chain and accepted about as many).
class Draws {
 public:
  Draws(const DraftModel& model, const std::vector<ProposeSeq>& seqs, const SpecSettings& s)
      : model_(model),
        seqs_(seqs),
        k_(s.top_k),
        fetch_(s.top_k),
        sample_(s.chain() && (s.sample_drafts || s.measure_drafts)),
        draw_(s.sample_drafts) {
    const size_t B = seqs.size();
    for (size_t b = 0; b < B; ++b)
      if (temp(static_cast<int64_t>(b)) > 0)  // sampling chains fetch q's support
        fetch_ = std::min(DraftTree::kSampledSupport, model.config().draft_vocab_size);
    confidence_.assign(B, 0.f);
    q_tok_.resize(B);
    q_prob_.resize(B);
  }
  void fetch(const Tensor& logits) { top_draft_tokens(model_, logits, fetch_, top_, lps_); }
  // Row r of the fetched rows as the candidates of sequence b's frontier node at `level`.
  std::pair<std::vector<int32_t>, std::vector<float>> candidates_of(int64_t b, int64_t r, int64_t level) {
    ProposeSeq ps = seqs_[static_cast<size_t>(b)];
    ps.temperature = temp(b);
    const float u = ps.temperature > 0 ? draft_coin(ps.seed, ps.index + static_cast<uint64_t>(level - 1)) : 0.f;
    const auto at = static_cast<size_t>(b);
    std::pair<std::vector<int32_t>, std::vector<float>> c;
    candidates(ps, draw_, top_.data() + r * fetch_, lps_.data() + r * fetch_, fetch_, k_, u, c.first, c.second,
               q_tok_[at], q_prob_[at], confidence_[at]);
    return c;
  }
  float confidence(int64_t b) const { return confidence_[static_cast<size_t>(b)]; }
  // A sampling chain's q rows into its tree: node d holds level d's draw, q row d - 1.
  void attach(int64_t b, DraftTree& t) {
    if (temp(b) <= 0)
      return;
    auto& qt = q_tok_[static_cast<size_t>(b)];
    UPD_CHECK(static_cast<int64_t>(qt.size()) == (t.size() - 1) * DraftTree::kSampledSupport)
        << "propose: " << qt.size() / DraftTree::kSampledSupport << " draws for " << t.size() - 1 << " drafts";
    t.drawn = draw_;
    t.q_row.assign(1, -1);
    for (int32_t d = 1; d < t.size(); ++d)
      t.q_row.push_back(d - 1);
    t.q_tokens = std::move(qt);
    t.q_probs = std::move(q_prob_[static_cast<size_t>(b)]);
  }

 private:
  float temp(int64_t b) const { return sample_ ? std::max(0.f, seqs_[static_cast<size_t>(b)].temperature) : 0.f; }
  const DraftModel& model_;
  const std::vector<ProposeSeq>& seqs_;
  int64_t k_, fetch_;
  bool sample_, draw_;  // chains of sampling sequences: q recorded; drawn from
  std::vector<float> confidence_;
  std::vector<std::vector<int32_t>> q_tok_;
  std::vector<std::vector<float>> q_prob_;
  std::vector<int32_t> top_;
  std::vector<float> lps_;
};

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
  Draws draws(model, seqs, s);
  draws.fetch(logits);
  for (int64_t b = 0; b < B; ++b) {
    const auto [t, l] = draws.candidates_of(b, b, 1);
    trees[b].expand(t, l);
  }

  // Per sequence: the pool index of each scratch entry written so far, and where each expanded
  // pool entry's output state lives (its row in `states`; -1: the root, row b of h_last).
  std::vector<std::vector<int32_t>> scratch(static_cast<size_t>(B));
  std::vector<std::vector<int32_t>> state_row(static_cast<size_t>(B));
  Tensor states = h_last;
  const float stop = s.stop_below > 0 ? std::log(static_cast<float>(s.stop_below)) : -INFINITY;
  for (int64_t level = 2; level <= s.steps; ++level) {
    // The sequences still drafting: a chain whose confidence fell below stop_below stops.
    std::vector<int64_t> live;
    for (int64_t b = 0; b < B; ++b)
      if (!(draws.confidence(b) < stop))
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
    draws.fetch(out.logits);
    int64_t row = 0;
    for (const int64_t b : live) {
      const std::vector<int32_t> fr = trees[b].frontier();
      const int64_t n = static_cast<int64_t>(fr.size());
      std::vector<int32_t> level_tok;
      std::vector<float> level_lp;
      for (int64_t i = 0; i < n; ++i) {
        const auto node = static_cast<size_t>(fr[i]);
        if (state_row[b].size() <= node)
          state_row[b].resize(node + 1, -1);
        state_row[b][node] = static_cast<int32_t>(row + i);
        const auto [t, l] = draws.candidates_of(b, row + i, level);
        level_tok.insert(level_tok.end(), t.begin(), t.end());
        level_lp.insert(level_lp.end(), l.begin(), l.end());
      }
      trees[b].expand(level_tok, level_lp);
      row += n;
    }
    states = out.state;  // this level's rows; a stopped sequence's nodes are never expanded again
  }
  std::vector<DraftTree> result;
  for (int64_t b = 0; b < B; ++b) {
    cache.truncate(*seqs[b].kv, base[b]);
    result.push_back(trees[b].finish());
    draws.attach(b, result.back());
  }
  return result;
}

}  // namespace updraft
