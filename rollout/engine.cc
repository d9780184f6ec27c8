#include "rollout/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "drafter/proposer.h"
#include "kernels/ops.h"

namespace updraft {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double SpecStats::alpha(size_t j) const {
  const int64_t prev = j == 0 ? rounds : (j - 1 < accepted_at.size() ? accepted_at[j - 1] : 0);
  const int64_t now = j < accepted_at.size() ? accepted_at[j] : 0;
  return prev == 0 ? 0.0 : static_cast<double>(now) / static_cast<double>(prev);
}

void SpecStats::add_round(int64_t drafted_tokens, int64_t accepted_tokens) {
  ++rounds;
  drafted += drafted_tokens;
  accepted += accepted_tokens;
  if (static_cast<int64_t>(accepted_at.size()) < accepted_tokens)
    accepted_at.resize(static_cast<size_t>(accepted_tokens), 0);
  for (int64_t j = 0; j < accepted_tokens; ++j)
    ++accepted_at[static_cast<size_t>(j)];
}

void SpecStats::merge(const SpecStats& o) {
  rounds += o.rounds;
  drafted += o.drafted;
  accepted += o.accepted;
  if (accepted_at.size() < o.accepted_at.size())
    accepted_at.resize(o.accepted_at.size(), 0);
  for (size_t j = 0; j < o.accepted_at.size(); ++j)
    accepted_at[j] += o.accepted_at[j];
  truncated += o.truncated;
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
}

void SpecStats::subtract(const SpecStats& e) {
  UPD_CHECK(e.rounds <= rounds && e.accepted_at.size() <= accepted_at.size()) << "SpecStats: not an earlier snapshot";
  rounds -= e.rounds;
  drafted -= e.drafted;
  accepted -= e.accepted;
  for (size_t j = 0; j < e.accepted_at.size(); ++j)
    accepted_at[j] -= e.accepted_at[j];
  truncated -= e.truncated;
  draft_seconds -= e.draft_seconds;
  verify_seconds -= e.verify_seconds;
}

namespace {

// The checks a drafter must pass to serve this policy with these settings.
void check_drafter_fits(const PolicyModel& model, const DraftModel& drafter, const SpecSettings& spec) {
  const PolicyConfig& pc = model.config();
  const DraftConfig& dc = drafter.config();
  UPD_REQUIRE(dc.vocab_size == pc.vocab_size && dc.target_hidden_size == pc.hidden_size &&
              drafter.device() == model.device() && drafter.act_dtype() == model.act_dtype())
      << "engine: the drafter was built for another policy (vocabulary " << dc.vocab_size << " vs " << pc.vocab_size
      << ", hidden size " << dc.target_hidden_size << " vs " << pc.hidden_size << ", or device)";
  model.check_aux_layers(drafter.aux_layers());
  UPD_REQUIRE(spec.top_k <= dc.draft_vocab_size)
      << "engine: speculation top_k " << spec.top_k << " exceeds the draft vocabulary " << dc.draft_vocab_size;
}

}  // namespace

Engine::Engine(const PolicyModel& model, const EngineOptions& opts, const DraftModel* drafter)
    : model_(model),
      opts_(opts),
      drafter_(drafter),
      cache_(model.kv_shape(), KvCache::blocks_for_bytes(model.kv_shape(), opts.block_size, opts.kv_cache_bytes),
             opts.block_size) {
  UPD_REQUIRE(opts.max_batch > 0 && opts.prefill_chunk > 0) << "engine: max_batch and prefill_chunk must be positive";
  UPD_REQUIRE(opts.capture_teacher_k >= 1) << "engine: capture_teacher_k must be at least 1";
  capture_layers_ = opts.capture_aux_layers.empty() ? model.config().default_aux_layers() : opts.capture_aux_layers;
  if (drafter_ == nullptr)
    return;  // capture layers are checked when a request asks for capture
  opts_.spec.validate();
  check_drafter_fits(model, *drafter_, opts_.spec);
  draft_cache_ = std::make_unique<KvCache>(
      drafter_->kv_shape(), KvCache::blocks_for_bytes(drafter_->kv_shape(), opts.block_size, opts.draft_kv_cache_bytes),
      opts.block_size);
}

void Engine::swap_drafter(const DraftModel* drafter) {
  UPD_REQUIRE(drafter_ != nullptr && drafter != nullptr)
      << "engine: swap_drafter needs an engine built with a drafter and a new one";
  check_drafter_fits(model_, *drafter, opts_.spec);
  const auto t0 = Clock::now();
  // Everything that can fail happens before the engine changes: the new draft cache and every
  // speculating sequence's reservation in it.
  auto cache = std::make_unique<KvCache>(
      drafter->kv_shape(),
      KvCache::blocks_for_bytes(drafter->kv_shape(), opts_.block_size, opts_.draft_kv_cache_bytes), opts_.block_size);
  std::vector<SeqKv> dkv(running_.size());
  int64_t longest = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Seq& s = *running_[i];
    if (!s.spec)
      continue;
    const int64_t len = static_cast<int64_t>(s.req.prompt.size()) + s.req.params.max_new_tokens;
    UPD_REQUIRE(cache->reserve(dkv[i], len + opts_.spec.scratch_entries()))
        << "engine: the new drafter's cache cannot hold the sequences in flight";
    longest = std::max(longest, s.kv.length);
  }
  KvCache scratch(model_.kv_shape(), std::max<int64_t>(1, cache_.blocks_needed(longest)), opts_.block_size);
  const DraftModel* old = drafter_;
  std::unique_ptr<KvCache> old_cache = std::move(draft_cache_);
  std::vector<SeqKv> old_dkv(running_.size());
  std::vector<DraftTree> old_tree(running_.size());
  drafter_ = drafter;
  draft_cache_ = std::move(cache);
  try {
    for (size_t i = 0; i < running_.size(); ++i) {
      Seq& s = *running_[i];
      if (!s.spec)
        continue;
      old_dkv[i] = std::exchange(s.dkv, dkv[i]);
      old_tree[i] = std::move(s.tree);
      rebuild_draft(s, scratch);
    }
  } catch (...) {  // an error in a forward: back to the old drafter, its caches untouched
    for (size_t i = 0; i < running_.size(); ++i)
      if (running_[i]->spec && !old_dkv[i].blocks.empty()) {
        running_[i]->dkv = old_dkv[i];
        running_[i]->tree = std::move(old_tree[i]);
      }
    drafter_ = old;
    draft_cache_ = std::move(old_cache);
    throw;
  }
  ++stats_.drafter_swaps;
  stats_.swap_seconds += seconds_since(t0);
}

void Engine::rebuild_draft(Seq& s, KvCache& scratch) {
  // The committed pairs are (aux state at p, token at p + 1) for p < kv.length: the prompt
  // prefilled so far, then the output but its last (pending) token. Their aux states come from
  // a forward of the policy over the committed tokens into a scratch cache (the serving cache
  // and its sequences are not touched), in prefill_chunk pieces like a prompt.
  const int64_t n = s.kv.length, H = model_.config().hidden_size,
                A = static_cast<int64_t>(drafter_->aux_layers().size());
  s.tree = DraftTree();
  if (n == 0)
    return;
  std::vector<int32_t> full = s.req.prompt;
  full.insert(full.end(), s.result.tokens.begin(), s.result.tokens.end());
  UPD_CHECK(static_cast<int64_t>(full.size()) > n) << "engine: " << n << " cached positions but " << full.size() << " tokens";
  const bool propose_next = s.prefilled == static_cast<int64_t>(s.req.prompt.size());
  SeqKv skv;
  UPD_CHECK(scratch.reserve(skv, n)) << "engine: the rebuild's scratch cache is too small";
  ForwardOptions fopts;
  fopts.aux = true;
  fopts.aux_layers = drafter_->aux_layers();
  DraftOut out;
  int64_t last = 0;
  for (int64_t p0 = 0; p0 < n; p0 += opts_.prefill_chunk) {
    const int64_t c = std::min(opts_.prefill_chunk, n - p0);
    std::vector<SeqStep> pol(1), dr(1);
    pol[0].kv = &skv;
    pol[0].tokens.assign(full.begin() + p0, full.begin() + p0 + c);
    ForwardOut fo = model_.forward(scratch, pol, fopts);
    dr[0].kv = &s.dkv;
    dr[0].tokens.assign(full.begin() + p0 + 1, full.begin() + p0 + c + 1);
    if (p0 + c == n && propose_next)
      dr[0].logit_rows = {static_cast<int32_t>(c - 1)};
    out = drafter_->forward(*draft_cache_, dr, fo.aux.reshape({c, A * H}));
    last = c - 1;
  }
  scratch.release(skv);
  UPD_CHECK(s.dkv.length == n) << "engine: rebuilt draft cache holds " << s.dkv.length << " pairs, the policy's " << n;
  if (!propose_next)
    return;
  Tensor h_last = Tensor::empty({1, H}, model_.act_dtype(), model_.device());
  ops::copy_rows(out.state, Tensor::from_i32({static_cast<int32_t>(last)}, {1}), h_last, Tensor::from_i32({0}, {1}));
  std::vector<DraftTree> trees = propose(*drafter_, *draft_cache_, {{&s.dkv, full[static_cast<size_t>(n)]}}, h_last,
                                         out.logits, opts_.spec);
  s.tree = std::move(trees[0]);
}

void Engine::validate(const GenRequest& req, const PolicyConfig& cfg) {
  const SamplingParams& p = req.params;
  UPD_REQUIRE(!req.prompt.empty()) << "empty prompt";
  for (size_t i = 0; i < req.prompt.size(); ++i)
    UPD_REQUIRE(req.prompt[i] >= 0 && req.prompt[i] < cfg.vocab_size)
        << "prompt token " << i << " has id " << req.prompt[i] << ", outside the vocabulary [0, " << cfg.vocab_size
        << ")";
  UPD_REQUIRE(p.max_new_tokens >= 1) << "max_new_tokens must be at least 1 (got " << p.max_new_tokens << ")";
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + p.max_new_tokens;
  UPD_REQUIRE(total <= cfg.max_position_embeddings)
      << "prompt of " << req.prompt.size() << " tokens + max_new_tokens " << p.max_new_tokens
      << " exceeds the model's context of " << cfg.max_position_embeddings << " tokens";
  UPD_REQUIRE(std::isfinite(p.temperature) && p.temperature >= 0)
      << "temperature must be a finite number >= 0 (got " << p.temperature << ")";
  UPD_REQUIRE(p.top_k >= 0) << "top_k must be >= 0 (0 disables it; got " << p.top_k << ")";
  UPD_REQUIRE(p.top_p > 0 && p.top_p <= 1) << "top_p must be in (0, 1] (got " << p.top_p << ")";
  for (int32_t s : p.stop_token_ids)
    UPD_REQUIRE(s >= 0 && s < cfg.vocab_size) << "stop token id " << s << " is outside the vocabulary";
}

uint64_t Engine::submit(GenRequest req) {
  validate(req, model_.config());
  if (req.capture && drafter_ == nullptr)
    model_.check_aux_layers(capture_layers_);
  const bool spec = drafter_ != nullptr && req.speculate;
  const int64_t len = static_cast<int64_t>(req.prompt.size()) + req.params.max_new_tokens;
  const int64_t need = cache_.blocks_needed(len + (spec ? opts_.spec.draft_tokens : 0));
  UPD_REQUIRE(need <= cache_.num_blocks()) << "request needs " << need << " KV blocks but the whole cache has "
                                           << cache_.num_blocks() << "; lower max_new_tokens or grow the cache";
  if (spec) {
    const int64_t dneed = draft_cache_->blocks_needed(len + opts_.spec.scratch_entries());
    UPD_REQUIRE(dneed <= draft_cache_->num_blocks())
        << "request needs " << dneed << " draft KV blocks but the whole draft cache has " << draft_cache_->num_blocks()
        << "; lower max_new_tokens or grow the draft cache";
  }
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->seed = req.params.has_seed ? req.params.seed : ops::mix64(opts_.seed ^ ops::mix64(s->id));
  s->spec = spec;
  s->result.id = s->id;
  s->result.prompt = req.prompt;
  s->req = std::move(req);
  const uint64_t id = s->id;
  waiting_.push_back(std::move(s));
  return id;
}

void Engine::admit() {
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < opts_.max_batch) {
    Seq& s = *waiting_.front();
    const int64_t len = static_cast<int64_t>(s.req.prompt.size()) + s.req.params.max_new_tokens;
    if (!cache_.reserve(s.kv, len + (s.spec ? opts_.spec.draft_tokens : 0)))
      break;  // first come, first served: wait for blocks to free up
    if (s.spec && !draft_cache_->reserve(s.dkv, len + opts_.spec.scratch_entries())) {
      cache_.release(s.kv);
      break;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

const std::vector<int64_t>& Engine::aux_layers() const {
  return drafter_ ? drafter_->aux_layers() : capture_layers_;
}

void Engine::finish_capture(Seq& s) const {
  const int64_t n = static_cast<int64_t>(s.req.prompt.size() + s.result.tokens.size());
  const int64_t W = static_cast<int64_t>(aux_layers().size()) * model_.config().hidden_size;
  // Rows past the end (accepted beyond a stop) go; the final position's row was never computed.
  s.cap_aux.resize(static_cast<size_t>(n * W), 0.f);
  s.result.aux = Tensor::from_f32(s.cap_aux, {n, W}).to_dtype(DType::BF16);
  s.cap_aux.clear();
  s.cap_aux.shrink_to_fit();
  UPD_CHECK(s.result.teacher_ids.size() == s.result.tokens.size() * static_cast<size_t>(s.result.teacher_k))
      << "engine: " << s.result.teacher_ids.size() / std::max<int64_t>(1, s.result.teacher_k)
      << " teacher rows captured for " << s.result.tokens.size() << " output tokens";
}

bool Engine::is_stop(const Seq& s, int32_t tok) const {
  const auto& stops = s.req.params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), tok) != stops.end())
    return true;
  const auto& eos = model_.config().eos_token_ids;
  return !s.req.params.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end();
}

size_t Engine::emit(Seq& s, const std::vector<int32_t>& tokens, const std::vector<float>& logprobs) {
  size_t k = 0;
  while (k < tokens.size() && s.result.finish_reason.empty()) {
    s.result.tokens.push_back(tokens[k]);
    s.result.logprobs.push_back(logprobs[k]);
    ++stats_.generated_tokens;
    if (is_stop(s, tokens[k]))
      s.result.finish_reason = "stop";
    else if (static_cast<int64_t>(s.result.tokens.size()) >= s.req.params.max_new_tokens)
      s.result.finish_reason = "length";
    ++k;
  }
  return k;
}

std::vector<GenResult> Engine::step() {
  admit();
  std::vector<GenResult> done;
  if (running_.empty())
    return done;

  // One entry per sequence in this step: a prompt chunk, the pending token, or a draft tree.
  std::vector<SeqStep> batch;
  std::vector<Seq*> owner;
  std::vector<int64_t> first_row, cached;  // per entry: first token row in the step, prior KV length
  std::vector<bool> prefill_step;
  int64_t budget = opts_.prefill_chunk, rows = 0;
  bool any_spec = false, any_capture = false;
  for (auto& sp : running_) {
    Seq& s = *sp;
    const int64_t plen = static_cast<int64_t>(s.req.prompt.size());
    SeqStep st;
    st.kv = &s.kv;
    const bool prefill = s.prefilled < plen;
    if (prefill) {
      const int64_t n = std::min(plen - s.prefilled, budget);
      if (n == 0)
        continue;
      budget -= n;
      st.tokens.assign(s.req.prompt.begin() + s.prefilled, s.req.prompt.begin() + s.prefilled + n);
      stats_.prompt_tokens += n;
      if (s.prefilled + n == plen)
        st.logit_rows = {static_cast<int32_t>(n - 1)};
    } else {
      if (s.tree.tokens.empty())
        s.tree = DraftTree::single(s.result.tokens.back());
      const int64_t n = s.tree.size();
      st.tokens = s.tree.tokens;
      for (int64_t i = 0; i < n; ++i) {
        st.positions.push_back(static_cast<int32_t>(s.kv.length + s.tree.depth[i]));
        st.logit_rows.push_back(static_cast<int32_t>(i));
      }
      if (n > 1)
        st.tree_mask = s.tree.mask();
    }
    any_spec |= s.spec;
    any_capture |= s.req.capture;
    first_row.push_back(rows);
    cached.push_back(s.kv.length);
    prefill_step.push_back(prefill);
    rows += static_cast<int64_t>(st.tokens.size());
    batch.push_back(std::move(st));
    owner.push_back(&s);
  }
  ForwardOptions fopts;
  fopts.aux = any_spec || any_capture;
  if (fopts.aux)
    fopts.aux_layers = aux_layers();
  const auto t_forward = Clock::now();
  ForwardOut fo = model_.forward(cache_, batch, fopts);
  const double forward_seconds = seconds_since(t_forward);
  ++stats_.steps;
  if (any_spec) {  // the speculating sequences' share of the forward, by rows, is verification
    for (size_t e = 0; e < batch.size(); ++e)
      if (owner[e]->spec) {
        const double share = forward_seconds * static_cast<double>(batch[e].tokens.size()) / static_cast<double>(rows);
        owner[e]->result.spec.verify_seconds += share;
        stats_.spec.verify_seconds += share;
      }
  }

  // The distributions verification needs, for every logit row: log_softmax for greedy rows,
  // the filtered sampling distribution for sampled ones.
  const int64_t R = fo.logits.defined() ? fo.logits.size(0) : 0, V = model_.config().vocab_size;
  Tensor host_logits, host_logp, host_probs, host_teacher_lp, host_teacher_ids;
  if (R > 0) {
    const Device d = model_.device();
    std::vector<float> temp, top_p;
    std::vector<int32_t> top_k;
    bool any_greedy = false, any_sampled = false;
    for (size_t e = 0; e < batch.size(); ++e) {
      const SamplingParams& p = owner[e]->req.params;
      for (size_t r = 0; r < batch[e].logit_rows.size(); ++r) {
        temp.push_back(p.temperature);
        top_k.push_back(p.top_k);
        top_p.push_back(p.top_p);
      }
      (p.temperature == 0 ? any_greedy : any_sampled) = true;
    }
    host_logits = fo.logits.to(Device::CPU);
    if (any_greedy || any_capture) {
      const auto t_logp = Clock::now();
      Tensor logp = Tensor::empty({R, V}, DType::F32, d);
      ops::log_softmax(fo.logits, logp);
      if (!any_greedy)
        stats_.capture_seconds += seconds_since(t_logp);
      if (any_greedy)
        host_logp = logp.to(Device::CPU);
      if (any_capture) {  // the teacher: top-k of every row's log-probabilities (ties: lower id)
        const auto t_topk = Clock::now();
        const int64_t k = std::min<int64_t>(opts_.capture_teacher_k, V);
        Tensor vals = Tensor::empty({R, k}, DType::F32, d), idx = Tensor::empty({R, k}, DType::I32, d);
        ops::topk(logp, k, vals, idx);
        host_teacher_lp = vals.to(Device::CPU);
        host_teacher_ids = idx.to(Device::CPU);
        stats_.capture_seconds += seconds_since(t_topk);
      }
    }
    if (any_sampled) {
      Tensor probs = Tensor::empty({R, V}, DType::F32, d);
      ops::sampling_probs(fo.logits, Tensor::from_f32(temp, {R}).to(d), Tensor::from_i32(top_k, {R}).to(d),
                          Tensor::from_f32(top_p, {R}).to(d), probs);
      host_probs = probs.to(Device::CPU);
    }
  }

  // Capture reads the aux states of committed rows on the host, f32.
  Tensor host_aux;
  const int64_t aux_width = static_cast<int64_t>(aux_layers().size()) * model_.config().hidden_size;
  if (any_capture) {
    const auto t_aux = Clock::now();
    host_aux = fo.aux.to(Device::CPU).reshape({-1, aux_width});
    if (host_aux.dtype() != DType::F32)
      host_aux = host_aux.to_dtype(DType::F32);
    stats_.capture_seconds += seconds_since(t_aux);
  }
  const int64_t teacher_k = std::min<int64_t>(opts_.capture_teacher_k, V);

  // Verify, emit, commit; collect the (state row, next token) pairs the drafter must absorb.
  std::vector<Seq*> spec_seqs;
  std::vector<std::vector<int32_t>> pair_rows, pair_tokens;
  int64_t logit_row = 0;
  for (size_t e = 0; e < batch.size(); ++e) {
    Seq& s = *owner[e];
    const int64_t n = static_cast<int64_t>(batch[e].tokens.size());
    std::vector<int32_t> prow, ptok;
    if (prefill_step[e]) {
      const int64_t p0 = s.prefilled;
      s.prefilled += n;
      for (int64_t i = 0; i < n; ++i) {
        prow.push_back(static_cast<int32_t>(first_row[e] + i));
        if (p0 + i + 1 < static_cast<int64_t>(s.req.prompt.size()))
          ptok.push_back(s.req.prompt[p0 + i + 1]);
      }
    }
    if (!batch[e].logit_rows.empty()) {
      const DraftTree tree = prefill_step[e] ? DraftTree::single(batch[e].tokens.back()) : s.tree;
      const SamplingParams& p = s.req.params;
      const uint64_t first = s.result.tokens.size();
      const Verdict v = p.temperature == 0 ? verify_greedy(tree, host_logits.data<float>() + logit_row * V,
                                                           host_logp.data<float>() + logit_row * V, V)
                                           : verify_sampled(tree, host_probs.data<float>() + logit_row * V, V, s.seed,
                                                            first, opts_.accept_rule);
      const int64_t base = logit_row;
      logit_row += tree.size();
      if (tree.size() > 1) {
        s.result.spec.add_round(tree.size() - 1, static_cast<int64_t>(v.nodes.size()));
        s.result.rounds.push_back({static_cast<int32_t>(tree.size() - 1), static_cast<int32_t>(v.nodes.size())});
        stats_.spec.add_round(tree.size() - 1, static_cast<int64_t>(v.nodes.size()));
      }
      const size_t kept = emit(s, v.tokens, v.logprobs);
      if (tree.size() > 1 && kept < v.tokens.size()) {
        ++s.result.spec.truncated;
        ++stats_.spec.truncated;
      }
      if (s.req.capture) {  // teacher of output token i: the row of the node it was drawn at
        const auto t_teacher = Clock::now();
        s.result.teacher_k = teacher_k;
        for (size_t i = 0; i < kept; ++i) {
          const int64_t row = base + (i == 0 ? 0 : v.nodes[i - 1]);
          const int32_t* ids = host_teacher_ids.data<int32_t>() + row * teacher_k;
          const float* lps = host_teacher_lp.data<float>() + row * teacher_k;
          s.result.teacher_ids.insert(s.result.teacher_ids.end(), ids, ids + teacher_k);
          s.result.teacher_logprobs.insert(s.result.teacher_logprobs.end(), lps, lps + teacher_k);
        }
        stats_.capture_seconds += seconds_since(t_teacher);
      }
      if (!prefill_step[e]) {  // keep the root and the accepted path in the policy's cache
        std::vector<int64_t> keep = {0};
        for (int32_t node : v.nodes)
          keep.push_back(node);
        cache_.keep(s.kv, cached[e], keep);
        for (int64_t node : keep)
          prow.push_back(static_cast<int32_t>(first_row[e] + node));
      }
      ptok.insert(ptok.end(), v.tokens.begin(), v.tokens.end());
      s.tree = DraftTree();
    }
    if (s.req.capture) {  // prow: the rows of the positions this step committed, in order
      const auto t_rows = Clock::now();
      for (int32_t r : prow) {
        const float* a = host_aux.data<float>() + static_cast<int64_t>(r) * aux_width;
        s.cap_aux.insert(s.cap_aux.end(), a, a + aux_width);
      }
      stats_.capture_seconds += seconds_since(t_rows);
    }
    if (s.spec && s.result.finish_reason.empty()) {
      UPD_CHECK(prow.size() == ptok.size())
          << "engine: " << prow.size() << " draft pairs but " << ptok.size() << " tokens";
      spec_seqs.push_back(&s);
      pair_rows.push_back(std::move(prow));
      pair_tokens.push_back(std::move(ptok));
    }
  }
  if (!spec_seqs.empty()) {
    const auto t_draft = Clock::now();
    draft_round(spec_seqs, pair_rows, pair_tokens, fo.aux);
    const double draft_seconds = seconds_since(t_draft);
    stats_.spec.draft_seconds += draft_seconds;
    for (Seq* sp : spec_seqs)
      sp->result.spec.draft_seconds += draft_seconds / static_cast<double>(spec_seqs.size());
  }

  for (auto it = running_.begin(); it != running_.end();) {
    if (!(*it)->result.finish_reason.empty()) {
      cache_.release((*it)->kv);
      if ((*it)->spec)
        draft_cache_->release((*it)->dkv);
      if ((*it)->req.capture) {
        const auto t_finish = Clock::now();
        finish_capture(**it);
        stats_.capture_seconds += seconds_since(t_finish);
      }
      done.push_back(std::move((*it)->result));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

void Engine::draft_round(const std::vector<Seq*>& seqs, const std::vector<std::vector<int32_t>>& pair_rows,
                         const std::vector<std::vector<int32_t>>& pair_tokens, const Tensor& aux) {
  // Extend every sequence's draft cache over its new committed pairs (aux state at position p,
  // token at p + 1); the ones whose prompt is in will propose from their last pair.
  const int64_t H = model_.config().hidden_size, A = static_cast<int64_t>(drafter_->aux_layers().size());
  std::vector<SeqStep> steps(seqs.size());
  std::vector<int32_t> src, dst;
  std::vector<ProposeSeq> proposers;
  std::vector<int32_t> last_rows;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    steps[i].kv = &s.dkv;
    steps[i].tokens = pair_tokens[i];
    for (int32_t r : pair_rows[i]) {
      src.push_back(r);
      dst.push_back(static_cast<int32_t>(dst.size()));
    }
    if (s.prefilled == static_cast<int64_t>(s.req.prompt.size())) {
      steps[i].logit_rows = {static_cast<int32_t>(pair_tokens[i].size() - 1)};
      proposers.push_back({&s.dkv, s.result.tokens.back()});
      last_rows.push_back(dst.back());
    }
  }
  const int64_t Te = static_cast<int64_t>(dst.size());
  Tensor hidden = Tensor::empty({Te, A * H}, model_.act_dtype(), model_.device());
  ops::copy_rows(aux.reshape({aux.size(0), A * H}), Tensor::from_i32(src, {Te}), hidden, Tensor::from_i32(dst, {Te}));
  DraftOut out = drafter_->forward(*draft_cache_, steps, hidden);
  for (size_t i = 0; i < seqs.size(); ++i)
    UPD_CHECK(seqs[i]->dkv.length == seqs[i]->kv.length)
        << "engine: draft cache holds " << seqs[i]->dkv.length << " pairs, the policy's " << seqs[i]->kv.length;
  if (proposers.empty())
    return;
  const int64_t P = static_cast<int64_t>(proposers.size());
  std::vector<int32_t> iota(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p)
    iota[p] = static_cast<int32_t>(p);
  Tensor h_last = Tensor::empty({P, H}, model_.act_dtype(), model_.device());
  ops::copy_rows(out.state, Tensor::from_i32(last_rows, {P}), h_last, Tensor::from_i32(iota, {P}));
  std::vector<DraftTree> trees = propose(*drafter_, *draft_cache_, proposers, h_last, out.logits, opts_.spec);
  size_t t = 0;
  for (Seq* s : seqs)
    if (s->prefilled == static_cast<int64_t>(s->req.prompt.size()))
      s->tree = std::move(trees[t++]);
}

Engine::InFlight Engine::in_flight(uint64_t id) const {
  for (const auto& s : running_)
    if (s->id == id)
      return {s->kv.length, s->result.tokens, s->tree};
  return {};
}

std::vector<GenResult> Engine::run() {
  std::vector<GenResult> all;
  while (has_work()) {
    auto d = step();
    UPD_CHECK(!d.empty() || !running_.empty()) << "engine: no progress possible";
    all.insert(all.end(), std::make_move_iterator(d.begin()), std::make_move_iterator(d.end()));
  }
  std::sort(all.begin(), all.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  return all;
}

}  // namespace updraft
