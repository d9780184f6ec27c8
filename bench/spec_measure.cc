#include "bench/spec_measure.h"

#include <algorithm>

#include "bench/bench_args.h"
#include "rollout/engine/engine.h"

namespace updraft::bench {

Run measure(const PolicyModel& model, const DraftModel* draft, const SpecSettings& s, int64_t B, int64_t groups,
            const std::vector<std::vector<int32_t>>& prompts, int64_t tokens, float temperature, bool ignore_eos,
            bool capture) {
  size_t longest = 0;
  for (const auto& p : prompts)
    longest = std::max(longest, p.size());
  EngineOptions o;
  o.max_batch = B;
  o.prefill_chunk = B * static_cast<int64_t>(longest);
  o.kv_cache_bytes = int64_t{1} << 30;
  o.spec = s;
  Engine e(model, o, draft);
  Run r;
  int64_t generated = 0;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t i = g * B + b;
      GenRequest q;
      q.prompt = prompts[static_cast<size_t>(i) % prompts.size()];
      q.params.temperature = temperature;
      q.params.has_seed = true;
      q.params.seed = static_cast<uint64_t>(i + 1);
      q.params.max_new_tokens = tokens + 1;
      q.params.ignore_eos = ignore_eos;
      q.capture = capture;  // the drafter's training data (aux states + teacher top-k) while generating
      e.submit(q);
    }
    e.step();  // prefill (+ the first token, + the first proposal)
    const SpecStats before = e.stats().spec;
    const int64_t gen0 = e.stats().generated_tokens;
    const double cap0 = e.stats().capture_seconds;
    const double t0 = now_s();
    while (e.has_work())
      e.step();
    r.seconds += now_s() - t0;
    r.capture_seconds += e.stats().capture_seconds - cap0;
    generated += e.stats().generated_tokens - gen0;
    SpecStats d = e.stats().spec;
    d.subtract(before);
    r.spec.merge(d);
  }
  r.tokens = generated;
  r.tokens_per_s = static_cast<double>(generated) / r.seconds;
  r.forwards = e.decode_forward_parts();
  return r;
}

}  // namespace updraft::bench
