#include "app/demo/models.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <limits>

#include "trainer/pretrain.h"
#include "trainer/train_once.h"

#ifndef UPDRAFT_SOURCE_DIR
#define UPDRAFT_SOURCE_DIR "."
#endif

namespace updraft::demo {

namespace fs = std::filesystem;

bool is_curriculum(const DemoOptions& o) {
  return o.domain.find('>') != std::string::npos;
}

Models resolve_models(const DemoOptions& o) {
  Models m;
  const fs::path shipped = fs::path(UPDRAFT_SOURCE_DIR) / "models";
  if (!o.model_dir.empty()) {
    m.policy = o.model_dir;
    m.name = fs::path(o.model_dir).filename().string();
  } else if (fs::exists(shipped / "small" / "config.json")) {
    m.policy = (shipped / "small").string();
    m.name = "built-in small";
    if (fs::exists(shipped / "small-eagle3" / "config.json"))
      m.converged_drafter = (shipped / "small-eagle3").string();
    // A curriculum starts from a drafter trained in-domain for its first stage: shipped, or
    // trained below on first use (cached in OUT/builtin).
    const std::string first_stage = o.domain.substr(0, o.domain.find('>'));
    const fs::path staged = shipped / ("small-eagle3-" + first_stage);
    if (o.drafter_dir.empty() && is_curriculum(o) && fs::exists(staged / "config.json"))
      m.drafter = staged.string();
    else if (o.drafter_dir.empty() && !is_curriculum(o) && fs::exists(shipped / "small-eagle3" / "config.json"))
      m.drafter = (shipped / "small-eagle3").string();
  } else {
    m.policy = (fs::path(o.out_dir) / "builtin" / "tiny").string();
    m.name = "tiny preset";
    if (!fs::exists(fs::path(m.policy) / "model.safetensors")) {
      spdlog::info("demo: no built-in small policy in {}; pretraining the tiny preset into {} (about a minute)",
                   shipped.string(), m.policy);
      train::PretrainOptions po;
      po.preset = "tiny";
      po.out_dir = m.policy;
      po.seed = o.seed;
      po.progress = [](const std::string& l) { spdlog::info("pretrain: {}", l); };
      train::pretrain(po);
    }
  }
  if (!o.drafter_dir.empty())
    m.drafter = o.drafter_dir;
  if (m.drafter.empty()) {
    const std::string suffix = is_curriculum(o) ? "-eagle3-" + o.domain.substr(0, o.domain.find('>')) : "-eagle3";
    m.drafter = (fs::path(o.out_dir) / "builtin" / (fs::path(m.policy).filename().string() + suffix)).string();
    if (!fs::exists(fs::path(m.drafter) / "model.safetensors")) {
      spdlog::info("demo: training the initial drafter in-domain on the policy's rollouts into {}", m.drafter);
      train::TrainOnceOptions to;
      to.model_dir = m.policy;
      to.out_dir = m.drafter;
      to.prompts = o.offline_prompts;
      to.heldout_prompts = 16;
      if (is_curriculum(o)) {  // in-domain for the first stage, over the whole vocabulary
        to.domain = o.domain.substr(0, o.domain.find('>'));
        to.draft_vocab = std::numeric_limits<int32_t>::max();
        to.prompts = std::max<int64_t>(o.offline_prompts, 512);
      }
      to.max_new_tokens = o.max_new_tokens;
      to.temperature = 1.0f;
      to.train.steps = 300;
      to.train.eval_every = 0;
      to.seed = o.seed;
      to.progress = [](const std::string& l) { spdlog::info("train --once: {}", l); };
      train::train_once(to);
    }
  }
  return m;
}

}  // namespace updraft::demo
