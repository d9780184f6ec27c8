#include "app/demo/reference.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/demo/phase.h"
#include "kernels/core/error.h"
#include "kernels/io/atomic_file.h"
#include "kernels/io/sha256.h"
#include "rollout/capture/capture.h"
#include "trainer/draft_train.h"
#include "trainer/ttt_model.h"

namespace updraft::demo {
namespace {

namespace fs = std::filesystem;

std::string recipe_key(const ReferenceInputs& in, const std::string& start_dir, const StrongRecipe& r) {
  const std::string policy_hash = sha256_file_hex((fs::path(in.policy_dir) / "model.safetensors").string());
  const std::string start_hash = sha256_file_hex((fs::path(start_dir) / "model.safetensors").string());
  const nlohmann::json recipe = {{"policy", policy_hash},
                                 {"start", start_hash},
                                 {"prompts", r.prompts},
                                 {"steps", r.steps},
                                 {"lr", r.lr},
                                 {"ttt_steps", r.ttt_steps},
                                 {"mix", {in.mix.arith, in.mix.code}},
                                 {"seed", in.seed},
                                 {"max_new_tokens", in.max_new_tokens}};
  return sha256_hex(recipe.dump()).substr(0, 24);
}

}  // namespace

ReferenceData reference_rollouts(const ReferenceInputs& in, const std::vector<int64_t>& aux_layers, int64_t prompts,
                                 uint64_t offset) {
  const std::vector<corpus::Sample> samples =
      corpus::make_samples(in.mix, corpus::Split::kTrain, static_cast<size_t>(prompts), in.seed + offset);
  EngineOptions eo = in.engine;
  eo.max_batch = 64;
  eo.seed = in.seed + 11;
  eo.suffix.mode = SuffixMode::kOff;
  Engine e(*in.policy, eo, nullptr);
  for (const corpus::Sample& s : samples) {
    GenRequest r;
    r.prompt = in.tok->encode(s.prompt);
    r.params.temperature = 1.0f;
    r.params.max_new_tokens = in.max_new_tokens;
    e.submit(std::move(r));
  }
  std::vector<Rollout> rollouts;
  for (const GenResult& g : e.run())
    if (!g.tokens.empty())
      rollouts.push_back({g.prompt, g.tokens});
  UPD_REQUIRE(rollouts.size() >= 2) << "demo: the reference drafters need at least two non-empty rollouts";
  CaptureOptions co;
  co.aux_layers = aux_layers;
  ReferenceData d;
  d.train = capture_samples(*in.policy, rollouts, co, 0);
  const size_t n_held = std::max<size_t>(1, d.train.size() / 10);
  d.held.assign(d.train.end() - static_cast<std::ptrdiff_t>(n_held), d.train.end());
  d.train.resize(d.train.size() - n_held);
  d.rollouts = static_cast<int64_t>(rollouts.size());
  return d;
}

ReferenceDrafter train_quick_reference(const ReferenceInputs& in, const ReferenceData& data, const DraftModel& initial,
                                       int64_t steps, const train::DraftTrainOptions& recipe) {
  const auto t0 = std::chrono::steady_clock::now();
  const DraftTarget target = in.policy->draft_target();
  const train::InMemoryDataset train_set(data.train), held(data.held);
  spdlog::info("demo: quick reference: {} rollouts of the final policy, {} steps of {} from the initial drafter",
               data.rollouts, steps, recipe.samples_per_step);
  train::TrainableDraft off(initial, target);
  train::DraftTrainOptions dto = recipe;
  dto.steps = steps;
  dto.warmup_steps = 0;
  dto.eval_every = 0;
  dto.seed = in.seed;
  const train::DraftTrainResult res = train::train_drafter(off, train_set, held, dto);
  ReferenceDrafter out;
  out.drafter = std::make_shared<const DraftModel>(off.to_draft());
  out.start = "the initial drafter";
  out.rollouts = data.rollouts;
  out.steps = steps;
  out.heldout_tau_hat_before = train::estimated_chain_tau(res.heldout_before);
  out.heldout_tau_hat = train::estimated_chain_tau(res.heldout_after);
  out.seconds = since(t0);
  return out;
}

ReferenceDrafter train_strong_reference(const ReferenceInputs& in, const std::string& start_dir,
                                        const StrongRecipe& recipe) {
  const auto t0 = std::chrono::steady_clock::now();
  const DraftTarget target = in.policy->draft_target();
  ReferenceDrafter out;
  out.start = start_dir;
  fs::path cached;
  if (!recipe.cache_dir.empty()) {
    cached = fs::path(recipe.cache_dir) / ("strong-" + recipe_key(in, start_dir, recipe));
    if (fs::exists(cached / "reference.json")) {
      const nlohmann::json meta = nlohmann::json::parse(std::ifstream(cached / "reference.json"));
      out.drafter = std::make_shared<const DraftModel>(DraftModel::load(cached.string(), target));
      out.rollouts = meta.at("rollouts").get<int64_t>();
      out.steps = meta.at("steps").get<int64_t>();
      out.heldout_tau_hat = meta.at("heldout_tau_hat").get<double>();
      out.heldout_tau_hat_before = meta.at("heldout_tau_hat_before").get<double>();
      out.cached = true;
      out.seconds = since(t0);
      spdlog::info("demo: strong reference: reusing {} (same final policy and recipe)", cached.string());
      return out;
    }
  }
  const DraftModel start = DraftModel::load(start_dir, target);
  ReferenceData d = reference_rollouts(in, start.aux_layers(), recipe.prompts, 13);
  const train::InMemoryDataset train_set(std::move(d.train)), held(std::move(d.held));
  spdlog::info(
      "demo: strong reference: {} rollouts of the final policy, {} steps from {} (a few minutes; cached in {})",
      d.rollouts, recipe.steps, start_dir, recipe.cache_dir.empty() ? "nowhere" : recipe.cache_dir);
  train::TrainableDraft draft(start, target);
  train::DraftTrainOptions dto;
  dto.steps = recipe.steps;
  dto.lr = recipe.lr;
  dto.ttt.steps = recipe.ttt_steps;
  dto.eval_every = 0;
  dto.seed = in.seed;
  dto.progress = [](const std::string& l) {
    if (l.rfind("step ", 0) != 0 || l.find("00/") != std::string::npos)  // every 100th step, and the held-out lines
      spdlog::info("demo: strong reference: {}", l);
  };
  const train::DraftTrainResult res = train::train_drafter(draft, train_set, held, dto);
  out.rollouts = d.rollouts;
  out.steps = recipe.steps;
  out.heldout_tau_hat_before = train::estimated_chain_tau(res.heldout_before);
  out.heldout_tau_hat = train::estimated_chain_tau(res.heldout_after);
  if (out.heldout_tau_hat >= out.heldout_tau_hat_before) {
    out.drafter = std::make_shared<const DraftModel>(draft.to_draft());
  } else {  // training on these rollouts did not beat the start: the start is the reference
    out.drafter = std::make_shared<const DraftModel>(start.rebind(target));
    out.heldout_tau_hat = out.heldout_tau_hat_before;
    out.steps = 0;
  }
  out.seconds = since(t0);
  if (!cached.empty()) {
    const fs::path tmp = cached.string() + ".tmp";
    fs::remove_all(tmp);
    out.drafter->save(tmp.string());
    const nlohmann::json meta = {{"start", start_dir},
                                 {"policy_dir", in.policy_dir},
                                 {"rollouts", out.rollouts},
                                 {"steps", out.steps},
                                 {"heldout_tau_hat", out.heldout_tau_hat},
                                 {"heldout_tau_hat_before", out.heldout_tau_hat_before},
                                 {"seconds", out.seconds}};
    write_file_atomic((tmp / "reference.json").string(), meta.dump(2) + "\n");
    fs::remove_all(cached);
    fs::rename(tmp, cached);
  }
  return out;
}

}  // namespace updraft::demo
