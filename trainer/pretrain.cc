#include "trainer/pretrain.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "kernels/io/atomic_file.h"
#include "kernels/ops/sampling.h"
#include "rollout/engine/engine.h"
#include "rollout/tokenizer.h"
#include "trainer/adamw.h"
#include "trainer/bpe_train.h"
#include "trainer/corpus.h"
#include "trainer/llama_train.h"
#include "trainer/train_checkpoint.h"

namespace updraft::train {
namespace {

namespace fs = std::filesystem;
constexpr const char* kEndOfText = "<|endoftext|>";
// The chat format of updraft's own models (/v1/chat/completions renders it): a "### Role:" line
// before each message, and "### Assistant:" to prompt the answer. models/small ships the same.
constexpr const char* kChatTemplate =
    "{% for message in messages %}\n### {{ message['role'] | capitalize }}:\n{{ message['content'] }}\n"
    "{% endfor %}\n{% if add_generation_prompt %}\n### Assistant:\n{% endif %}\n";

struct Preset {
  PolicyConfig arch;
  int64_t vocab, seq_len, batch, steps, warmup, corpus_chars, eval_every, checkpoint_every;
  double lr;
};

Preset preset_of(const std::string& name) {
  Preset p{};
  PolicyConfig& c = p.arch;
  c.arch = PolicyArch::Llama;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 10000;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 2048;
  c.dtype = DType::BF16;
  if (name == "tiny") {
    // 8 layers so that the default aux layers {2, L/2, L-3} are distinct.
    c.hidden_size = 64;
    c.intermediate_size = 176;
    c.num_layers = 8;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    p = {c, 512, 128, 8, 300, 20, 1'500'000, 100, 100, 3e-3};
  } else if (name == "small") {
    // 8 layers of width 448 (8 heads of 56, 4 KV heads) and a ~2k-token vocabulary: ~18.8M
    // parameters, ~37 MB in bf16, larger than the 32 MB last-level cache of the reference CPU.
    // 8 layers keep the default aux layers {2, L/2, L-3} distinct.
    c.hidden_size = 448;
    c.intermediate_size = 1216;
    c.num_layers = 8;
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.head_dim = 56;
    p = {c, 4096, 128, 32, 1000, 50, 16'000'000, 100, 25, 1.5e-3};
  } else {
    UPD_FAIL() << "unknown pretrain preset '" << name << "' (expected tiny or small)";
  }
  return p;
}

// Documents of one split, tokenized and concatenated (each ends with <|endoftext|>).
std::vector<int32_t> token_stream(const Tokenizer& tok, corpus::Split split, int64_t chars, uint64_t seed) {
  corpus::CorpusSpec spec;
  spec.split = split;
  spec.seed = seed;
  spec.max_chars = static_cast<uint64_t>(chars);
  spec.end_of_text = kEndOfText;
  const std::string text = corpus::build_corpus(spec);
  return tok.encode(text, false);
}

std::vector<std::string> tokenizer_texts(int64_t chars, uint64_t seed) {
  std::vector<std::string> texts;
  int64_t total = 0;
  for (uint64_t i = 0; total < chars; ++i) {
    const corpus::Domain d = corpus::mix_domain({}, seed, i);
    const corpus::Sample s = corpus::make_split_sample(d, corpus::Split::kTrain, seed, i);
    texts.push_back(corpus::document(s, ""));  // the special token is added by the tokenizer itself
    total += static_cast<int64_t>(texts.back().size());
  }
  return texts;
}

// B windows of T+1 tokens at offsets drawn from (seed, step).
std::vector<int32_t> batch_at(const std::vector<int32_t>& stream, int64_t B, int64_t T, uint64_t seed, int64_t step) {
  const int64_t span = static_cast<int64_t>(stream.size()) - (T + 1);
  UPD_REQUIRE(span > 0) << "pretrain: the token stream (" << stream.size() << ") is shorter than one window";
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(B * (T + 1)));
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t r = ops::mix64(seed ^ ops::mix64(static_cast<uint64_t>(step) * 1315423911ULL + b));
    const int64_t at = static_cast<int64_t>(r % static_cast<uint64_t>(span));
    out.insert(out.end(), stream.begin() + at, stream.begin() + at + T + 1);
  }
  return out;
}

double heldout_loss(const TrainableLlama& m, const std::vector<int32_t>& stream, int64_t T, int64_t windows) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t w = 0; w < windows; w += 4) {
    const int64_t B = std::min<int64_t>(4, windows - w);
    const LmLoss l = m.evaluate(batch_at(stream, B, T, 0xe7a1, w), B, T, nullptr);
    sum += l.loss * static_cast<double>(l.targets);
    n += l.targets;
  }
  return n ? sum / static_cast<double>(n) : 0.0;
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

nlohmann::json generate_samples(const std::string& dir, const Tokenizer& tok, uint64_t seed) {
  PolicyModel policy = PolicyModel::load(dir);
  Engine engine(policy);
  std::vector<corpus::Sample> prompts;
  for (corpus::Domain d : {corpus::Domain::kArith, corpus::Domain::kCode})
    for (const auto& s : corpus::make_samples(d, corpus::Split::kHeldOut, 3, seed))
      prompts.push_back(s);
  for (const auto& s : prompts) {
    GenRequest r;
    r.prompt = tok.encode(s.prompt);
    r.params.temperature = 0;
    r.params.max_new_tokens = 96;
    engine.submit(std::move(r));
  }
  auto results = engine.run();
  std::sort(results.begin(), results.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < results.size() && i < prompts.size(); ++i) {
    const std::string text = tok.decode(results[i].tokens, true);
    out.push_back({{"domain", corpus::domain_name(prompts[i].domain)},
                   {"prompt", prompts[i].prompt},
                   {"completion", text},
                   {"reward", corpus::reward(prompts[i], text)}});
  }
  return out;
}

}  // namespace

PolicyConfig pretrain_preset_config(const std::string& preset, int64_t vocab) {
  PolicyConfig c = preset_of(preset).arch;
  c.vocab_size = vocab;
  return c;
}

PretrainResult pretrain(const PretrainOptions& o) {
  UPD_REQUIRE(!o.out_dir.empty()) << "pretrain: an output directory is required";
  Preset p = preset_of(o.preset);
  auto pick = [](int64_t v, int64_t def) { return v > 0 ? v : def; };
  const int64_t V = pick(o.vocab_size, p.vocab), T = pick(o.seq_len, p.seq_len), B = pick(o.batch, p.batch);
  const int64_t steps = pick(o.steps, p.steps), chars = pick(o.corpus_chars, p.corpus_chars);
  const int64_t eval_every = pick(o.eval_every, p.eval_every),
                ckpt_every = pick(o.checkpoint_every, p.checkpoint_every);
  const int64_t warmup = o.warmup_steps >= 0 ? o.warmup_steps : std::min(p.warmup, steps / 10);
  const double lr = o.lr > 0 ? o.lr : p.lr;
  auto say = [&](const std::string& s) {
    if (o.progress)
      o.progress(s);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  UPD_REQUIRE(!ec) << "pretrain: cannot create " << o.out_dir << ": " << ec.message();
  const std::string tok_path = (fs::path(o.out_dir) / "tokenizer.json").string();
  const std::string ckpt_dir = (fs::path(o.out_dir) / "checkpoint").string();
  const bool resuming = o.resume && fs::exists(fs::path(ckpt_dir) / "trainer_state.json") && fs::exists(tok_path);

  // 1. Tokenizer.
  std::optional<Tokenizer> tok;
  if (resuming) {
    tok.emplace(Tokenizer::load(tok_path));
    say("resuming: tokenizer from " + tok_path);
  } else {
    const int64_t tok_chars = std::min<int64_t>(chars, 4'000'000);
    BpeTrainOptions bo;
    bo.vocab_size = V;
    bo.special_tokens = {kEndOfText};
    tok.emplace(train_bpe(tokenizer_texts(tok_chars, o.seed), bo));
    tok->save(tok_path);
    say("tokenizer: " + std::to_string(tok->vocab_size()) + " tokens trained on " + std::to_string(tok_chars) +
        " characters (" + fmt("%.1f s", seconds()) + ")");
  }
  const int32_t eot = tok->token_id(kEndOfText);
  UPD_REQUIRE(eot >= 0) << "pretrain: the tokenizer has no " << kEndOfText;
  write_file_atomic((fs::path(o.out_dir) / "tokenizer_config.json").string(),
                    nlohmann::json{{"tokenizer_class", "PreTrainedTokenizerFast"},
                                   {"eos_token", kEndOfText},
                                   {"pad_token", kEndOfText},
                                   {"model_max_length", p.arch.max_position_embeddings},
                                   {"chat_template", kChatTemplate}}
                            .dump(2) +
                        "\n");

  // 2. Token streams.
  const std::vector<int32_t> train = token_stream(*tok, corpus::Split::kTrain, chars, o.seed);
  const std::vector<int32_t> held =
      token_stream(*tok, corpus::Split::kHeldOut, std::max<int64_t>(chars / 50, 200'000), o.seed);
  say("data: " + std::to_string(train.size()) + " training tokens, " + std::to_string(held.size()) +
      " held-out tokens (" + fmt("%.2f", static_cast<double>(chars) / static_cast<double>(train.size())) +
      " characters per token)");

  // 3. Model and optimiser.
  PolicyConfig cfg = p.arch;
  cfg.vocab_size = tok->vocab_size();
  cfg.eos_token_ids = {eot};
  TrainableLlama model(cfg, o.seed);
  AdamWOptions ao;
  ao.beta1 = 0.9;
  ao.beta2 = 0.95;
  ao.weight_decay = 0.1;
  AdamW opt(model.params(), ao);
  LrScheduleOptions so;
  so.decay = LrDecay::Cosine;
  so.peak_lr = lr;
  so.total_steps = steps;
  so.warmup_steps = warmup;
  so.min_lr_ratio = 0.1;
  int64_t start = 0;
  if (resuming) {
    const TrainState st = load_train_checkpoint(ckpt_dir, model.params(), opt);
    start = st.step;
    say("resuming from step " + std::to_string(start));
  }
  const LrSchedule sched(so);
  say("model: " + std::to_string(model.params().numel()) + " parameters (" +
      fmt("%.1f MB", static_cast<double>(cfg.weight_bytes(DType::BF16)) / 1e6) + " in bf16), batch " +
      std::to_string(B) + " x " + std::to_string(T) + " tokens, " + std::to_string(steps) + " steps");

  PretrainResult res;
  double recent = 0;
  int64_t recent_n = 0, skipped = 0;
  auto t_last = std::chrono::steady_clock::now();
  for (int64_t step = start; step < steps; ++step) {
    model.params().zero_grad();
    const LmLoss l = model.forward_backward(batch_at(train, B, T, o.seed, step), B, T, nullptr, 1.f);
    const double gnorm = clip_grad_norm(model.params(), 1.0);
    if (!std::isfinite(gnorm)) {
      ++skipped;  // a non-finite gradient: skip the update, keep going
      UPD_REQUIRE(skipped < 10) << "pretrain: 10 non-finite gradients; stopping";
      continue;
    }
    opt.step(sched.lr(step));
    recent += l.loss;
    ++recent_n;
    res.train_loss = l.loss;
    const bool last = step + 1 == steps;
    if ((step + 1) % 10 == 0 || last) {
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_last).count();
      t_last = std::chrono::steady_clock::now();
      const double tps = static_cast<double>(recent_n * B * T) / std::max(dt, 1e-9);
      const double eta = static_cast<double>(steps - step - 1) * B * T / std::max(tps, 1e-9);
      say("step " + std::to_string(step + 1) + "/" + std::to_string(steps) + "  loss " +
          fmt("%.3f", recent / static_cast<double>(std::max<int64_t>(recent_n, 1))) + "  lr " +
          fmt("%.2e", sched.lr(step)) + "  |g| " + fmt("%.2f", gnorm) + "  " + fmt("%.0f tok/s", tps) + "  eta " +
          fmt("%.0f s", eta));
      recent = 0;
      recent_n = 0;
    }
    if ((step + 1) % eval_every == 0 || last) {
      res.heldout_loss = heldout_loss(model, held, T, 16);
      say("  held-out loss " + fmt("%.3f", res.heldout_loss) + " (" + fmt("%.2f", std::exp(res.heldout_loss)) +
          " perplexity)");
    }
    if ((step + 1) % ckpt_every == 0 || last) {
      TrainState st;
      st.step = step + 1;
      st.schedule = so;
      st.user = {{"preset", o.preset}, {"seed", o.seed}};
      save_train_checkpoint(ckpt_dir, model.params(), opt, st);
    }
  }
  res.steps = steps;
  res.tokens_seen = steps * B * T;

  // 4. The model directory.
  model.save_hf(o.out_dir, DType::BF16);
  res.seconds = seconds();
  nlohmann::json samples = generate_samples(o.out_dir, *tok, o.seed);
  for (const auto& s : samples)
    say("sample [" + s["domain"].get<std::string>() + "] " + s["prompt"].get<std::string>() + "|" +
        s["completion"].get<std::string>());
  nlohmann::json report = {{"preset", o.preset},
                           {"parameters", model.params().numel()},
                           {"vocab_size", cfg.vocab_size},
                           {"seq_len", T},
                           {"batch", B},
                           {"steps", steps},
                           {"tokens_seen", res.tokens_seen},
                           {"train_loss", res.train_loss},
                           {"heldout_loss", res.heldout_loss},
                           {"seconds", res.seconds},
                           {"corpus_chars", chars},
                           {"seed", o.seed},
                           {"samples", samples}};
  write_file_atomic((fs::path(o.out_dir) / "pretrain_report.json").string(), report.dump(2) + "\n");
  say("saved " + o.out_dir + " (" + fmt("%.0f s", res.seconds) + ")");
  return res;
}

}  // namespace updraft::train
