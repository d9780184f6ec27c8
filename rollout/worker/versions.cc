#include "rollout/worker/versions.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "kernels/core/error.h"
#include "kernels/io/sha256.h"
#include "kernels/io/weight_version.h"

namespace updraft {
namespace {

// The version an offered directory carries, with its files' sha256: a published version's from
// its manifest (verified in full: every file's size and digest), and `given` must equal its
// version when not 0. A plain Hugging Face / EAGLE directory (what RL frameworks save) has no
// manifest: it takes `given`, or when 0 the version after `newest`, and its files are hashed
// here; the loader checks them (header, names, shapes, dtypes, finite).
WeightVersion offered_version(const std::string& dir, const char* kind, uint64_t given, uint64_t newest) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "manifest.json")) {
    WeightVersion v = verify_version(dir, kind);
    if (given != 0 && given != v.version)
      throw Error("weight_version " + std::to_string(given) + " does not match the manifest's version " +
                  std::to_string(v.version));
    return v;
  }
  if (!fs::is_directory(dir))
    throw Error(dir + " is not a directory");
  WeightVersion v;
  v.dir = dir;
  v.kind = kind;
  v.version = given != 0 ? given : newest + 1;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.is_regular_file())
      v.sha256[f.path().filename().string()] = sha256_file_hex(f.path().string());
  return v;
}

}  // namespace

Versions::Versions(uint32_t worker_id, PolicyVersion policy, DrafterVersion drafter)
    : id_(worker_id), policy_(std::move(policy)), drafter_(std::move(drafter)) {
  UPD_REQUIRE(policy_.model != nullptr) << "worker: a policy is required";
  if (drafter_.model)
    policy_.model->check_aux_layers(drafter_.model->aux_layers());
}

bool Versions::offer_policy(const std::string& dir, std::string* why, uint64_t version, WeightVersion* accepted) {
  try {
    uint64_t newest = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      newest = std::max(policy_.version, staged_policy_.version);
    }
    WeightVersion offered = offered_version(dir, "policy", version, newest);
    const uint64_t ver = offered.version;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ver <= std::max(policy_.version, staged_policy_.version))
        throw Error("version " + std::to_string(ver) + " is not newer than the serving or staged one");
    }
    auto p = std::make_shared<const PolicyModel>(PolicyModel::load(dir));
    std::lock_guard<std::mutex> lock(mu_);
    check_successor(p->config(), policy_.model->config());
    if (drafter_.model)
      p->check_aux_layers(drafter_.model->aux_layers());
    if (ver <= std::max(policy_.version, staged_policy_.version))
      throw Error("version " + std::to_string(ver) + " is not newer than the serving or staged one");
    staged_policy_ = {std::move(p), ver};
    spdlog::debug("worker {}: staged policy v{}", id_, ver);
    if (accepted)
      *accepted = std::move(offered);
    return true;
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++rejected_policy_;
    spdlog::warn("worker {}: rejected policy {}: {}", id_, dir, e.what());
    if (why)
      *why = e.what();
    return false;
  }
}

bool Versions::offer_drafter(const std::string& dir, std::string* why, uint64_t version, WeightVersion* accepted) {
  try {
    uint64_t newest = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      newest = std::max(drafter_.version, staged_drafter_.version);
      for (uint64_t b : banned_)
        newest = std::max(newest, b);
    }
    WeightVersion offered = offered_version(dir, "drafter", version, newest);
    const uint64_t ver = offered.version;
    std::shared_ptr<const PolicyModel> policy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ver <= std::max(drafter_.version, staged_drafter_.version))
        throw Error("version " + std::to_string(ver) + " is not newer than the serving or staged one");
      if (banned_.count(ver))
        throw Error("version " + std::to_string(ver) + " was rolled back");
      policy = staged_policy_.model ? staged_policy_.model : policy_.model;
    }
    auto d = std::make_shared<const DraftModel>(DraftModel::load(dir, policy->draft_target()));
    policy->check_aux_layers(d->aux_layers());
    std::lock_guard<std::mutex> lock(mu_);
    if (drafter_.model)
      UPD_REQUIRE(d->aux_layers() == drafter_.model->aux_layers())
          << "the drafter reads other aux layers than the serving one";
    if (ver <= std::max(drafter_.version, staged_drafter_.version))
      throw Error("version " + std::to_string(ver) + " is not newer than the serving or staged one");
    staged_drafter_ = {std::move(d), ver};
    spdlog::debug("worker {}: staged drafter v{}", id_, ver);
    if (accepted)
      *accepted = std::move(offered);
    return true;
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++rejected_drafter_;
    spdlog::warn("worker {}: rejected drafter {}: {}", id_, dir, e.what());
    if (why)
      *why = e.what();
    return false;
  }
}

void Versions::set_reference(DrafterVersion d) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_.model->check_aux_layers(d.model->aux_layers());
  reference_ = std::move(d);
}

PolicyVersion Versions::policy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_;
}

DrafterVersion Versions::drafter() const {
  std::lock_guard<std::mutex> lock(mu_);
  return drafter_;
}

DrafterVersion Versions::reference() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reference_;
}

DrafterVersion Versions::previous() const {
  std::lock_guard<std::mutex> lock(mu_);
  return previous_;
}

bool Versions::policy_staged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staged_policy_.model != nullptr;
}

bool Versions::drafter_staged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staged_drafter_.model != nullptr;
}

void Versions::install_policy() {
  std::lock_guard<std::mutex> lock(mu_);
  UPD_CHECK(staged_policy_.model != nullptr) << "worker: no staged policy";
  policy_ = std::exchange(staged_policy_, {});
  const DraftTarget t = policy_.model->draft_target();
  // Drafters read the policy's embedding table: every one kept follows the new policy (a
  // staged drafter was loaded against the old one's table unless it came after the policy).
  for (DrafterVersion* d : {&drafter_, &reference_, &previous_, &staged_drafter_})
    if (d->model)
      d->model = std::make_shared<const DraftModel>(d->model->rebind(t));
  spdlog::info("worker {}: serving policy v{}", id_, policy_.version);
}

DrafterVersion Versions::install_drafter() {
  std::lock_guard<std::mutex> lock(mu_);
  UPD_CHECK(staged_drafter_.model != nullptr) << "worker: no staged drafter";
  if (drafter_.model)
    previous_ = drafter_;
  drafter_ = std::exchange(staged_drafter_, {});
  spdlog::info("worker {}: serving drafter v{} (policy v{})", id_, drafter_.version, policy_.version);
  return drafter_;
}

DrafterVersion Versions::staged_drafter() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staged_drafter_;
}

void Versions::confirm() {
  std::lock_guard<std::mutex> lock(mu_);
  previous_ = {};
}

DrafterVersion Versions::roll_back() {
  std::lock_guard<std::mutex> lock(mu_);
  UPD_CHECK(previous_.model != nullptr) << "worker: no previous drafter to roll back to";
  banned_.insert(drafter_.version);
  drafter_ = std::exchange(previous_, {});
  return drafter_;
}

int64_t Versions::rejected_policy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_policy_;
}

int64_t Versions::rejected_drafter() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_drafter_;
}

}  // namespace updraft
