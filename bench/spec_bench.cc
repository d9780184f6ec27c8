// Speculative vs plain decoding, side by side in one run, at batch 1, 4, 16 and 64, for a chain
// and a tree setting: tokens/s of each, their ratio, tau (mean accepted drafts + 1 per round),
// acceptance per draft position, and where the speculative time goes (draft, verify, the rest).
// Roofline: the plain step's weight bytes over the machine's measured read bandwidth.
//
// The policy is a random Llama-style model larger than the last-level cache; the drafter is
// random too unless --draft DIR names a trained one (the speed targets belong to trained
// drafters; a random one accepts almost nothing, so this measures the cost side honestly).
//
// With --model DIR (a policy with its tokenizer.json, e.g. the built-in small one) the prompts are
// held-out prompts of the built-in corpus, encoded by that tokenizer, and each response ends at
// end of text or after --tokens N, as RL rollouts do (--ignore-eos runs every sequence to N);
// --sequences S (default 32) decodes S sequences per batch size, one batch after another, plain
// and every setting taking turns batch by batch (each on its own engine), --reps times over;
// --temperature T samples (seeded per sequence) instead of greedy decoding; --domain arith|code
// takes the prompts of one domain only (default: the mix).
// --chains 1,2,4 replaces the settings compared (chain 4, chain 6, tree 4x3) by chains of those
// depths: how the best depth moves with the drafter's acceptance; --stop-below 0,0.3 runs each of
// them also stopping once its drafts are jointly less likely than 0.3 under the drafter
// (SpecSettings::stop_below; the round anatomy then times the chain at its mean depth in the run);
// --drafts auto|on|off|all: at temperature > 0 a chain's drafts are drawn from the drafter's
// distribution (on, drafter/proposer.h), or are its top tokens (off), or whichever the engine
// measures to accept more (auto, the default: rollout/spec/draft_sampling.h); all runs each
// setting with auto and again with on and off (settings marked on and off);
// --adaptive adds an arm whose engine chooses the drafter's depth per step (rollout/spec/adaptive.h)
// up to the last setting's depth and with its stop rule, as a serving worker does; in each turn it
// first decodes --warmup-groups W untimed batches of other held-out prompts (default: as many as
// it times), as a long-lived engine has learned its costs and acceptance before.
// `spec_bench --help` lists all.
// --anatomy-rows prints only the round anatomy, for chains verifying those numbers of rows;
// --anatomy-context sets the cached tokens its forwards attend to (64 by default).
// --draft-weights auto|bf16|int8|both: the drafter's serving weights (ops::prepare_linear_int8);
// auto (the default) is what `updraft` serves on this machine (drafter/draft_model.h); both runs
// every setting (and anatomy row) with bf16 weights and again with int8 ones, side by side.
// --group N runs only the group-drafting comparison (bench/group_bench.h): --sequences / N groups of
// N siblings, the drafter at the first of --chains (default chain 4), suffix drafts of up to
// --suffix-nodes K nodes (default 16) with candidates at --suffix-min-prob P or more (default 0.2),
// --suffix-factor F nodes per matched token (default 2), --suffix-min-match M (default 3) and
// --suffix-depth D tokens deep at most (default 8);
// --adaptive (with --group) lets the eagle and merged arms choose the drafter's depth per step; each engine first
// decodes --warmup-groups W untimed groups of other prompts (default: as many as it times);
// --pages both runs plain decoding and every setting again with the policy's and the drafter's
// weights and the KV caches in 4 KiB pages ("... 4k"), against huge pages (the default,
// kernels/core/host_arena.h), all taking turns;
// --device cuda runs the policy and the drafter on the GPU (bf16 weights and activations), without
// the round anatomy and the roofline, which measure the CPU.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_policy.h"
#include "bench/group_bench.h"
#include "bench/machine_probe.h"
#include "bench/round_anatomy.h"
#include "bench/spec_measure.h"
#include "drafter/random_draft.h"
#include "kernels/core/host_arena.h"
#include "kernels/ops/gemm.h"
#include "rollout/engine/engine.h"
#include "rollout/random_policy.h"
#include "rollout/tokenizer.h"
#include "trainer/corpus.h"

using namespace updraft;

using bench::median;
using bench::Run;

namespace {

// A measured setting's round anatomy: its tau and seconds per round in the engine, and a chain
// that stops (SpecSettings::stop_below) timed at its mean depth in the run.
bench::AnatomySetting anatomy_setting(const std::string& name, SpecSettings s, const Run& run,
                                      const DraftModel* draft) {
  const SpecStats& st = run.spec;
  if (s.stop_below > 0 && st.rounds > 0) {
    const int64_t d =
        std::clamp<int64_t>(std::lround(static_cast<double>(st.drafted) / static_cast<double>(st.rounds)), 1, s.steps);
    s = SpecSettings{d, 1, d + 1};
  }
  return {name, s, st.tau(), st.rounds == 0 ? 0.0 : run.seconds / static_cast<double>(st.rounds), run.forwards, draft};
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, capture_cost = false, ignore_eos = false;
  int64_t tokens = 32, sequences = 0;  // 0: one batch (random model) or 32 (--model)
  int reps = 0;                        // 0: 1 (random model) or 3 (--model)
  std::vector<int64_t> batches = {1, 4, 16, 64};
  std::vector<int64_t> anatomy_rows;
  int64_t anatomy_context = 64;
  std::string draft_dir, model_dir, draft_weights = "auto", drafts = "auto";
  float temperature = 0;
  int64_t group = 0, warmup = -1;  // -1: as many groups as are timed
  bool adaptive = false;
  SuffixOptions suffix;
  corpus::Mix mix;
  std::vector<std::pair<std::string, SpecSettings>> settings = {
      {"chain 4", {4, 1, 5}}, {"chain 6", {6, 1, 7}}, {"tree 4x3 (10 tok)", {4, 3, 10}}};
  int64_t batch = 0;
  std::vector<int64_t> chains;
  std::vector<double> stop_below;
  std::string cpu_kernel, domain, device = "cpu", pages = "huge";
  CLI::App app{
      "updraft spec_bench: speculative against plain decoding, side by side in one run (see the header "
      "of bench/spec_bench.cc)"};
  app.add_flag("--quick", quick, "a smaller random policy and fewer repetitions");
  app.add_flag("--capture-cost", capture_cost, "also time capturing the drafter's training data");
  app.add_flag("--ignore-eos", ignore_eos, "run every sequence to --tokens");
  app.add_option("--reps", reps, "turns of each arm (default 3 with --model, else 1)")
      ->check(CLI::Range(1, bench::kMost));
  app.add_option("--sequences", sequences, "sequences per batch size (default 32 with --model, else one batch)")
      ->check(CLI::Range(1, bench::kMost));
  app.add_option("--tokens", tokens, "new tokens per sequence at most")->check(CLI::Range(1, bench::kMost));
  app.add_option("--batch", batch, "one batch size instead of 1, 4, 16 and 64")->check(CLI::Range(1, bench::kMost));
  app.add_option("--draft", draft_dir, "a trained drafter (EAGLE format; default: random)");
  app.add_option("--model", model_dir, "a policy with its tokenizer (default: a random policy)");
  app.add_option("--temperature", temperature, "sampling temperature (0: greedy)")->check(CLI::Range(0.0, 100.0));
  app.add_option("--domain", domain, "prompts of one domain only (default: the mix)")
      ->check(CLI::IsMember({"arith", "code"}));
  app.add_option("--stop-below", stop_below,
                 "with --chains: each chain at each of these stop_below values (a chain stops drafting once its "
                 "drafts' joint probability under the drafter is below it; 0: never)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--chains", chains, "chains of these depths instead of chain 4, chain 6 and tree 4x3")
      ->delimiter(',')
      ->check(CLI::Range(1, 16));
  app.add_option("--cpu-kernel", cpu_kernel, "the CPU's bf16 kernel: auto, portable, avx2, fma, dot or amx");
  app.add_option("--anatomy-rows", anatomy_rows, "print only the round anatomy, verifying these numbers of rows")
      ->delimiter(',')
      ->check(CLI::Range(1, bench::kMost));
  app.add_option("--anatomy-context", anatomy_context, "cached tokens the anatomy's forwards attend to")
      ->check(CLI::Range(1, bench::kMost));
  app.add_option("--draft-weights", draft_weights,
                 "the drafter's serving weights: auto (what updraft serves here), bf16, int8 or both")
      ->check(CLI::IsMember({"bf16", "int8", "auto", "both"}));
  app.add_option("--group", group, "only the group-drafting comparison, groups of N siblings")
      ->check(CLI::Range(1, bench::kMost));
  app.add_option("--suffix-nodes", suffix.max_nodes, "suffix draft nodes a sequence grafts per round at most")
      ->check(CLI::Range(0, bench::kMost));
  app.add_option("--suffix-depth", suffix.max_depth, "the deepest suffix draft, in tokens after the root")
      ->check(CLI::Range(1, 64));
  app.add_flag("--adaptive", adaptive,
               "the drafter's depth chosen per step: an extra arm up to the last setting (with --group: the eagle "
               "and merged arms)");
  app.add_option("--suffix-factor", suffix.spec_factor, "suffix draft nodes per matched token")
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--suffix-min-match", suffix.min_match, "the shortest match that drafts")
      ->check(CLI::Range(1, bench::kMost));
  app.add_option("--suffix-min-prob", suffix.min_prob, "the least probability of a suffix candidate")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--warmup-groups", warmup,
                 "untimed groups (batches) of other prompts each engine (the adaptive arm's) decodes first")
      ->check(CLI::Range(0, bench::kMost));
  app.add_option("--drafts", drafts,
                 "a sampling chain's drafts (EngineOptions::draft_sampling): auto, on (drawn from the drafter's "
                 "distribution), off (its top tokens), or all (each setting with auto, and again with on and off)")
      ->check(CLI::IsMember({"auto", "on", "off", "all"}))
      ->capture_default_str();
  app.add_option("--pages", pages,
                 "huge: weights and KV caches in huge pages where the system has them; both: also in 4 KiB pages")
      ->check(CLI::IsMember({"huge", "both"}))
      ->capture_default_str();
  app.add_option("--device", device, "cpu or cuda: where the policy and the drafter run")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (batch > 0)
    batches = {batch};
  if (!cpu_kernel.empty())
    ops::set_cpu_bf16_kernel(ops::parse_cpu_bf16_kernel(cpu_kernel));
  if (!domain.empty())
    mix = corpus::Mix::only(corpus::domain_from_name(domain));
  if (!chains.empty()) {
    settings.clear();
    for (int64_t d : chains)
      for (double p : stop_below.empty() ? std::vector<double>{0.0} : stop_below) {
        char name[48];
        std::snprintf(name, sizeof name, p > 0 ? "chain %ld stop %.2f" : "chain %ld", d, p);
        settings.push_back({name, {d, 1, d + 1, p}});
      }
  }
  const std::pair<std::string, SpecSettings> adaptive_up_to = settings.back();  // before the copies below
  // Each setting's draft sampling (--drafts; all: copies marked on and off).
  std::vector<DraftSampling> setting_sampling(settings.size(), parse_draft_sampling(drafts == "all" ? "auto" : drafts));
  for (size_t k = 0, n = settings.size(); drafts == "all" && k < n; ++k)
    for (DraftSampling m : {DraftSampling::kOn, DraftSampling::kOff}) {
      settings.push_back({settings[k].first + " " + draft_sampling_name(m), settings[k].second});
      setting_sampling.push_back(m);
    }
  const Device dev = device == "cuda" ? Device::CUDA : Device::CPU;
  const char* bad = warmup >= 0 && group == 0 && !adaptive ? "--warmup-groups applies to --group or --adaptive only"
                    : dev == Device::CUDA && (!anatomy_rows.empty() || draft_weights == "int8" ||
                                              draft_weights == "both" || !cuda_available())
                        ? "--device cuda needs bf16 drafter weights (--draft-weights auto or bf16) and a usable CUDA "
                          "device (no --anatomy-rows)"
                    : pages == "both" && (dev == Device::CUDA || draft_weights == "both" || group > 0 ||
                                          !anatomy_rows.empty() || model_dir.empty() || draft_dir.empty())
                        ? "--pages both compares host memory pages for a --model and a --draft: not with --device "
                          "cuda, --draft-weights both, --group or --anatomy-rows"
                        : nullptr;
  if (bad) {
    std::fprintf(stderr, "spec_bench: %s\n", bad);
    return 2;
  }
  parse_draft_weights(draft_weights == "both" ? "int8" : draft_weights);  // Error for a bad name or no tiles
  std::printf("updraft speculative decoding benchmark (%s)\n", quick ? "quick" : "full");
  const bench::MachineLimits m = bench::probe_machine(quick ? (size_t{256} << 20) : (size_t{1} << 30));
  std::printf("machine: %d threads, measured streaming read bandwidth %.1f GB/s, cpu bf16 kernel %s\n", m.threads,
              m.read_gbps, ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()));
  // --pages both: the policy and the drafter also with their prepared weights in 4 KiB pages,
  // loaded first (memory allocated after many huge pages is scattered in small pieces, which
  // streams slower: that would be the order's effect, not the page size's).
  std::optional<PolicyModel> model_4k;
  std::optional<DraftModel> draft_4k;
  if (pages == "both") {
    set_host_huge_pages(false);
    model_4k.emplace(PolicyModel::load(model_dir, {.device = dev}));
    set_draft_weights(parse_draft_weights(draft_weights));
    draft_4k.emplace(DraftModel::load(draft_dir, model_4k->draft_target()));
    set_host_huge_pages(true);
  }
  PolicyModel model = model_dir.empty()
                          ? random_policy(bench::bench_policy_config(quick), 1, DType::BF16, {.device = dev})
                          : PolicyModel::load(model_dir, {.device = dev});
  const PolicyConfig cfg = model.config();
  // Prompts: held-out corpus prompts through the model's tokenizer, or fixed pseudo-random ids.
  std::vector<std::vector<int32_t>> prompts;
  if (model_dir.empty())
    ignore_eos = true;  // a random policy's end-of-text token is noise
  if (sequences == 0)
    sequences = model_dir.empty() ? 1 : 32;
  if (reps == 0)
    reps = model_dir.empty() ? 1 : 3;
  if (!model_dir.empty()) {
    const Tokenizer tok = Tokenizer::load(model_dir);
    for (const corpus::Sample& smp : corpus::make_samples(
             mix, corpus::Split::kHeldOut, std::max<int64_t>(64, adaptive ? 2 * sequences : sequences), 3))
      prompts.push_back(tok.encode(smp.prompt));
  } else {
    for (int64_t b = 0; b < 64; ++b) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < 32; ++i)
        p.push_back(static_cast<int32_t>((b * 7919 + i * 104729) % cfg.vocab_size));
      prompts.push_back(p);
    }
  }
  // Bytes a decode step reads: every weight but the embedding table (one row is looked up),
  // unless the table is tied to the lm_head, which reads all of it.
  const double wbytes = static_cast<double>(cfg.weight_bytes(DType::BF16) -
                                            (cfg.tie_word_embeddings ? 0 : cfg.vocab_size * cfg.hidden_size * 2));
  DraftConfig dc;
  dc.hidden_size = dc.target_hidden_size = cfg.hidden_size;
  dc.intermediate_size = cfg.intermediate_size;
  dc.num_heads = cfg.num_heads;
  dc.num_kv_heads = cfg.num_kv_heads;
  dc.head_dim = cfg.head_dim;
  dc.vocab_size = cfg.vocab_size;
  dc.draft_vocab_size = cfg.vocab_size / 4;
  const auto load_draft = [&](DraftWeights w) {
    set_draft_weights(w);
    const VocabMap ids = spread_vocab(dc.draft_vocab_size, cfg.vocab_size);
    return draft_dir.empty() ? random_draft(dc, ids, model.draft_target(), 2, DType::BF16)
                             : DraftModel::load(draft_dir, model.draft_target());
  };
  const DraftModel draft =
      load_draft(draft_weights == "both" ? DraftWeights::kAsStored : parse_draft_weights(draft_weights));
  // --draft-weights both: every setting runs again with the drafter's weights in int8 ("... int8").
  std::vector<const DraftModel*> setting_draft(settings.size(), &draft);
  std::optional<DraftModel> draft_q8;
  if (draft_weights == "both") {
    draft_q8 = load_draft(DraftWeights::kInt8);
    for (size_t k = 0, n = settings.size(); k < n; ++k) {
      settings.push_back({settings[k].first + " int8", settings[k].second});
      setting_draft.push_back(&*draft_q8);
      setting_sampling.push_back(setting_sampling[k]);
    }
  }
  std::vector<bool> setting_4k(settings.size(), false);
  if (pages == "both") {
    for (size_t k = 0, n = settings.size(); k < n; ++k) {
      settings.push_back({settings[k].first + " 4k", settings[k].second});
      setting_draft.push_back(&*draft_4k);
      setting_4k.push_back(true);
      setting_sampling.push_back(setting_sampling[k]);
    }
  }
  std::printf("policy: %s, Llama-style, %ld layers, hidden %ld, vocab %ld, bf16 weights %.0f MiB, on %s\n",
              model_dir.empty() ? "random" : model_dir.c_str(), cfg.num_layers, cfg.hidden_size, cfg.vocab_size,
              cfg.weight_bytes(DType::BF16) / 1048576.0, device.c_str());
  std::printf("drafter: %s, draft vocabulary %ld, weights %s\n",
              draft_dir.empty() ? "random (untrained)" : draft_dir.c_str(), draft.config().draft_vocab_size,
              draft_weights == "both" ? "bf16 and int8 (settings marked int8)"
              : draft_weights == "auto"
                  ? (std::string("auto: ") + draft_weights_name(resolved_draft_weights(dev))).c_str()
                  : draft_weights.c_str());
  std::printf(
      "workload: %s prompts, %ld sequences per batch size (at least one batch), %s %ld new tokens each, "
      "temperature %.2f, timed after prefill\n",
      model_dir.empty() ? "32-token pseudo-random" : "held-out corpus", sequences,
      ignore_eos ? "exactly" : "up to end of text or", tokens, temperature);
  if (group > 0) {
    bench::GroupBenchArgs ga;
    ga.model = &model;
    ga.draft = &draft;
    ga.spec = settings.size() == 3 ? SpecSettings{4, 1, 5} : settings.front().second;
    ga.suffix = suffix;
    ga.prompts = prompts;
    ga.group = group;
    ga.groups = std::max<int64_t>(1, sequences / group);
    ga.warmup = warmup;
    ga.tokens = tokens;
    ga.reps = reps;
    ga.temperature = temperature;
    ga.ignore_eos = ignore_eos;
    ga.adaptive = adaptive;
    return bench::run_group_bench(ga) ? 0 : 2;
  }
  if (!anatomy_rows.empty()) {  // verification cost alone, at these row counts (chains)
    std::vector<bench::AnatomySetting> rows;
    for (size_t d = 0; d < (draft_q8 ? 2u : 1u); ++d)
      for (int64_t n : anatomy_rows)
        rows.push_back({std::to_string(n) + " rows" + (d ? " int8" : ""),
                        SpecSettings{n - 1, 1, n},
                        0,
                        0,
                        {},
                        d ? &*draft_q8 : nullptr});
    bench::print_round_anatomy(model, draft, rows, m, anatomy_context, quick ? 10 : 40, ForwardProfile{});
    return 0;
  }
  // The roofline's bandwidth (the CPU's): reads over as many bytes as the weights (the cache's
  // where they fit and stay between steps; the streaming probe above measures memory).
  const bool cpu = dev == Device::CPU;
  const double weights_gbps = cpu ? bench::probe_read_gbps(static_cast<size_t>(wbytes)) : 0.0;
  if (cpu)
    std::printf("read bandwidth over the weights' %.0f MiB: %.1f GB/s\n\n", wbytes / 1048576.0, weights_gbps);
  std::printf("%-18s %5s %10s %10s %7s %6s %8s %7s %7s %7s  %s\n", "setting", "batch", "plain t/s", "spec t/s", "ratio",
              "tau", "roofline", "draft", "verify", "other", "accept per position");
  for (int64_t B : batches) {
    const int64_t groups = std::max<int64_t>(1, sequences / B);
    // Plain and every setting take turns batch by batch, `reps` times over (fresh engines each
    // time); each figure is the total over its turns, so a slow spell of the machine (they come
    // and go within seconds here) touches all of them alike.
    // With --pages both, a second plain arm (4 KiB pages) for the settings marked 4k.
    std::vector<bench::ArmSpec> arm_specs = {{nullptr, {}}};
    if (model_4k)
      arm_specs.push_back({nullptr, {}, &*model_4k, true});
    const size_t plains = arm_specs.size();
    for (size_t k = 0; k < settings.size(); ++k)
      arm_specs.push_back({setting_draft[k], settings[k].second, setting_4k[k] ? &*model_4k : nullptr, setting_4k[k],
                           false, setting_sampling[k]});
    if (adaptive)  // the depth chosen per step, up to the last setting's (printed last)
      arm_specs.push_back({&draft, adaptive_up_to.second, nullptr, false, true});
    std::vector<Run> spec = bench::take_turns(
        model, arm_specs, groups, reps, {B, &prompts, tokens, temperature, ignore_eos}, warmup < 0 ? groups : warmup);
    const std::vector<Run> plain_runs(spec.begin(), spec.begin() + static_cast<std::ptrdiff_t>(plains));
    const Run plain = spec.front();
    spec.erase(spec.begin(), spec.begin() + static_cast<std::ptrdiff_t>(plains));
    if (model_4k)
      std::printf("%-18s %5ld %10.1f %10.1f %6.2fx  (plain decoding, 4 KiB pages against huge pages)\n", "plain 4k", B,
                  plain.tokens_per_s, plain_runs[1].tokens_per_s, plain_runs[1].tokens_per_s / plain.tokens_per_s);
    const auto roofline = [&](const Run& p) {  // plain decoding's share of the bandwidth bound
      char roof[16] = "-";
      if (cpu)
        std::snprintf(roof, sizeof roof, "%.0f%%",
                      100.0 * wbytes * p.tokens_per_s / static_cast<double>(B) / 1e9 / weights_gbps);
      return std::string(roof);
    };
    for (size_t k = 0; k < settings.size(); ++k) {
      const Run& p = plain_runs[setting_4k[k] ? 1 : 0];
      bench::print_setting_row(settings[k].first, settings[k].second, B, p, spec[k], roofline(p).c_str());
    }
    if (adaptive)
      bench::print_adaptive_row(adaptive_up_to, B, plain, spec.back(), roofline(plain).c_str());
    if (B == 1 && cpu) {  // what a round costs in plain steps, and the ratio that predicts at each tau
      std::vector<bench::AnatomySetting> rows;
      for (size_t k = 0; k < settings.size(); ++k)
        if (!setting_4k[k])  // the anatomy's forwards run on the huge-page policy
          rows.push_back(anatomy_setting(settings[k].first, settings[k].second, spec[k], setting_draft[k]));
      bench::print_round_anatomy(model, draft, rows, m, anatomy_context, quick ? 10 : 40, plain.forwards);
    }
  }
  if (capture_cost)  // record capture (docs/messaging.md): its cost on tokens/s, side by side
    bench::print_capture_cost(model, draft, batches, sequences, reps, {1, &prompts, tokens, temperature, ignore_eos});
  std::printf(
      "\nroofline: plain decode's weight bytes per second as a share of the read bandwidth over the weights. draft, "
      "verify, other: shares of the speculative run's time (other = sampling, bookkeeping).\n");
  return 0;
}
