#include "rollout/engine.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace updraft {
namespace {

float element(const Tensor& t, int64_t r, int64_t c) {
  const int64_t C = t.size(1);
  return t.reshape({t.numel(), 1}).rows(r * C + c, r * C + c + 1).to_f32_vector()[0];
}

}  // namespace

Engine::Engine(const PolicyModel& model, const EngineOptions& opts)
    : model_(model),
      opts_(opts),
      cache_(model.kv_shape(), KvCache::blocks_for_bytes(model.kv_shape(), opts.block_size, opts.kv_cache_bytes),
             opts.block_size) {
  UPD_REQUIRE(opts.max_batch > 0 && opts.prefill_chunk > 0) << "engine: max_batch and prefill_chunk must be positive";
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
  const int64_t need = cache_.blocks_needed(static_cast<int64_t>(req.prompt.size()) + req.params.max_new_tokens);
  UPD_REQUIRE(need <= cache_.num_blocks()) << "request needs " << need << " KV blocks but the whole cache has "
                                           << cache_.num_blocks() << "; lower max_new_tokens or grow the cache";
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->seed = req.params.has_seed ? req.params.seed : ops::mix64(opts_.seed ^ ops::mix64(s->id));
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
    if (!cache_.reserve(s.kv, static_cast<int64_t>(s.req.prompt.size()) + s.req.params.max_new_tokens))
      break;  // first come, first served: wait for blocks to free up
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

bool Engine::is_stop(const Seq& s, int32_t tok) const {
  const auto& stops = s.req.params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), tok) != stops.end())
    return true;
  const auto& eos = model_.config().eos_token_ids;
  return !s.req.params.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end();
}

std::vector<GenResult> Engine::step() {
  admit();
  std::vector<GenResult> done;
  if (running_.empty())
    return done;

  // One decode token per prefilled sequence; prompt chunks within the prefill budget.
  std::vector<SeqStep> batch;
  std::vector<Seq*> owner, sampled;  // sampled: sequences with a logit row, in row order
  int64_t budget = opts_.prefill_chunk;
  for (auto& sp : running_) {
    Seq& s = *sp;
    const int64_t plen = static_cast<int64_t>(s.req.prompt.size());
    SeqStep st;
    st.kv = &s.kv;
    if (s.prefilled < plen) {
      const int64_t n = std::min(plen - s.prefilled, budget);
      if (n == 0)
        continue;
      budget -= n;
      st.tokens.assign(s.req.prompt.begin() + s.prefilled, s.req.prompt.begin() + s.prefilled + n);
      s.prefilled += n;
      stats_.prompt_tokens += n;
      if (s.prefilled == plen)
        st.logit_rows = {static_cast<int32_t>(n - 1)};
    } else {
      st.tokens = {s.result.tokens.back()};
      st.logit_rows = {0};
    }
    if (!st.logit_rows.empty())
      sampled.push_back(&s);
    batch.push_back(std::move(st));
    owner.push_back(&s);
  }
  ForwardOut fo = model_.forward(cache_, batch);
  ++stats_.steps;

  const int64_t R = static_cast<int64_t>(sampled.size());
  if (R > 0) {
    const Device d = model_.device();
    std::vector<float> temp(R), top_p(R), uni(R);
    std::vector<int32_t> top_k(R);
    bool any_greedy = false;
    for (int64_t r = 0; r < R; ++r) {
      const SamplingParams& p = sampled[r]->req.params;
      temp[r] = p.temperature;
      top_k[r] = p.top_k;
      top_p[r] = p.top_p;
      uni[r] = ops::uniform01(sampled[r]->seed, sampled[r]->result.tokens.size());
      any_greedy |= p.temperature == 0;
    }
    const int64_t V = model_.config().vocab_size;
    Tensor probs = Tensor::empty({R, V}, DType::F32, d), toks = Tensor::empty({R}, DType::I32, d);
    ops::sampling_probs(fo.logits, Tensor::from_f32(temp, {R}).to(d), Tensor::from_i32(top_k, {R}).to(d),
                        Tensor::from_f32(top_p, {R}).to(d), probs);
    ops::sample_from_probs(probs, Tensor::from_f32(uni, {R}).to(d), toks);
    Tensor logp;
    if (any_greedy) {
      logp = Tensor::empty({R, V}, DType::F32, d);
      ops::log_softmax(fo.logits, logp);
    }
    const std::vector<int32_t> tok = toks.to_i32_vector();
    for (int64_t r = 0; r < R; ++r) {
      Seq& s = *sampled[r];
      const float lp = s.req.params.temperature == 0 ? element(logp, r, tok[r]) : std::log(element(probs, r, tok[r]));
      s.result.tokens.push_back(tok[r]);
      s.result.logprobs.push_back(lp);
      ++stats_.generated_tokens;
      if (is_stop(s, tok[r]))
        s.result.finish_reason = "stop";
      else if (static_cast<int64_t>(s.result.tokens.size()) >= s.req.params.max_new_tokens)
        s.result.finish_reason = "length";
    }
  }
  for (auto it = running_.begin(); it != running_.end();) {
    if (!(*it)->result.finish_reason.empty()) {
      cache_.release((*it)->kv);
      done.push_back(std::move((*it)->result));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return done;
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
