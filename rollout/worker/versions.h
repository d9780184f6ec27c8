// The weight versions a rollout worker serves, and those offered to it (design.md §5.2-5.3).
//
// offer_policy / offer_drafter (any thread) load the new version BESIDE the serving one and
// validate it: manifest and sha256 of every file (kernels/io/weight_version.h) when it is a
// published version (a plain Hugging Face directory has neither), the model's
// header, names, shapes and dtypes (its loader), version order (strictly newer than the serving
// and staged ones, never a rolled-back drafter), and for a drafter that it fits the policy it
// will serve with. A rejected offer changes nothing; it is logged and counted. An accepted one is
// staged; the worker's engine thread installs it (install_policy / install_drafter) when its
// engines allow: a drafter between two steps, a policy once no sequence is running (every
// completion comes from one policy version). A new policy rebinds every drafter kept (serving,
// reference, previous, staged) to its embedding table. Old versions are freed when the last
// engine using them lets go (shared ownership).
//
// Thread safety: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "drafter/draft_model.h"
#include "kernels/io/weight_version.h"
#include "rollout/policy_model.h"

namespace updraft {

struct PolicyVersion {
  std::shared_ptr<const PolicyModel> model;
  uint64_t version = 0;
};

struct DrafterVersion {
  std::shared_ptr<const DraftModel> model;  // null: none
  uint64_t version = 0;
};

class Versions {
 public:
  Versions(uint32_t worker_id, PolicyVersion policy, DrafterVersion drafter);

  // why (optional): the reason of a rejection. A directory with a manifest carries its version
  // (`version`, when not 0, must equal it); a plain Hugging Face / EAGLE directory takes
  // `version`, or when 0 the next one. accepted (optional): the version staged and its files'
  // sha256 (the manifest's, verified; a plain directory's, computed as it is offered).
  bool offer_policy(const std::string& dir, std::string* why = nullptr, uint64_t version = 0,
                    WeightVersion* accepted = nullptr);
  bool offer_drafter(const std::string& dir, std::string* why = nullptr, uint64_t version = 0,
                     WeightVersion* accepted = nullptr);
  void set_reference(DrafterVersion d);  // a fixed drafter to compare against (kReference)

  PolicyVersion policy() const;
  DrafterVersion drafter() const;
  DrafterVersion reference() const;
  DrafterVersion previous() const;  // the drafter replaced by the serving one, until confirmed
  bool policy_staged() const;
  bool drafter_staged() const;

  // Engine thread. The staged policy serves from now; every kept drafter is rebound to it.
  void install_policy();
  // Engine thread. The staged drafter serves from now (the serving one becomes previous()).
  DrafterVersion install_drafter();
  DrafterVersion staged_drafter() const;
  // Engine thread, after a swap was watched: keep the new drafter (previous() is dropped), or
  // restore previous() and ban the new version for good.
  void confirm();
  DrafterVersion roll_back();

  int64_t rejected_policy() const;
  int64_t rejected_drafter() const;

 private:
  uint32_t id_;
  mutable std::mutex mu_;
  PolicyVersion policy_, staged_policy_;
  DrafterVersion drafter_, reference_, previous_, staged_drafter_;
  std::set<uint64_t> banned_;
  int64_t rejected_policy_ = 0, rejected_drafter_ = 0;
};

}  // namespace updraft
