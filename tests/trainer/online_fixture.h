// A small policy saved as a published version, its rollouts and captured samples, and a
// drafter trained on them: shared by the online trainer and worker tests.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernels/io/weight_version.h"
#include "messaging/codec.h"
#include "messaging/record_store.h"
#include "rollout/capture/capture.h"
#include "rollout/capture/record_convert.h"
#include "rollout/engine/engine.h"
#include "rollout/policy_model.h"
#include "rollout/random_policy.h"
#include "tests/rollout/test_models.h"
#include "trainer/draft_train.h"
#include "trainer/llama_train.h"

namespace updraft::testing_online {

namespace fs = std::filesystem;

inline PolicyConfig config() {
  PolicyConfig c = testing_models::tiny_config(PolicyArch::Llama);
  return c;
}

// A trainable policy holding the weights of rollout/random_policy.h (structured enough for a
// drafter to learn; a freshly initialised trainable one is nearly uniform).
inline train::TrainableLlama make_policy(uint64_t seed) {
  train::TrainableLlama m(config(), seed);
  const auto tensors = random_policy_tensors(config(), seed, DType::F32);
  for (train::Param* p : m.params())
    p->value.copy_from(tensors.at(p->name));
  return m;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("updraft_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

inline WeightVersion publish_policy(const train::TrainableLlama& m, const std::string& root, uint64_t v) {
  return publish_version(root, "policy", v, [&](const std::string& d) { m.save_hf(d, DType::F32); });
}

inline std::vector<std::vector<int32_t>> prompts(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out(n);
  for (auto& p : out)
    for (int i = 0; i < 5; ++i)
      p.push_back(static_cast<int32_t>(1 + rng() % 96));
  return out;
}

inline std::vector<GenRequest> greedy_requests(const std::vector<std::vector<int32_t>>& ps, int64_t max_new = 32) {
  std::vector<GenRequest> out;
  for (const auto& p : ps) {
    GenRequest r;
    r.prompt = p;
    r.params.temperature = 0;
    r.params.max_new_tokens = max_new;
    r.params.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

inline std::vector<Rollout> rollouts(const PolicyModel& p, const std::vector<std::vector<int32_t>>& ps) {
  Engine e(p);
  for (const GenRequest& r : greedy_requests(ps))
    e.submit(r);
  auto res = e.run();
  std::sort(res.begin(), res.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  std::vector<Rollout> out;
  for (const auto& r : res)
    out.push_back({r.prompt, r.tokens});
  return out;
}

inline std::vector<TttSample> capture(const PolicyModel& p, const std::vector<Rollout>& r, uint64_t version) {
  CaptureOptions co;
  co.teacher_k = 8;
  return capture_samples(p, r, co, version);
}

// An untrained draft (draft vocabulary = the whole vocabulary).
inline DraftModel fresh_draft(const PolicyModel& p, uint64_t seed) {
  const PolicyConfig& c = p.config();
  train::TrainableDraft d(train::draft_config_for(c, c.vocab_size), VocabMap::identity(c.vocab_size), p.draft_target(),
                          p.lm_head(), seed);
  return d.to_draft();
}

inline DraftModel trained_draft(const PolicyModel& p, const std::vector<TttSample>& samples, int64_t steps) {
  const PolicyConfig& c = p.config();
  train::TrainableDraft d(train::draft_config_for(c, c.vocab_size), VocabMap::identity(c.vocab_size), p.draft_target(),
                          p.lm_head(), 3);
  const train::InMemoryDataset data(samples);
  train::DraftTrainOptions o;
  o.steps = steps;
  o.eval_every = 0;
  o.ttt.steps = 3;
  train::train_drafter(d, data, data, o);
  return d.to_draft();
}

inline SpecStats acceptance(const PolicyModel& p, const DraftModel& d, const std::vector<std::vector<int32_t>>& ps) {
  EngineOptions eo;
  eo.spec = SpecSettings{4, 1, 5};
  Engine e(p, eo, &d);
  for (const GenRequest& r : greedy_requests(ps))
    e.submit(r);
  e.run();
  return e.stats().spec;
}

// A published policy v1 and an empty buffer store in a temporary directory.
struct BufferBed {
  explicit BufferBed(const char* name) : t(name) {
    policy = std::make_shared<const PolicyModel>(PolicyModel::load(publish_policy(m, t.str() + "/p", 1).dir));
    messaging::StoreOptions so;
    so.path = t.str() + "/buffer";
    store = std::shared_ptr<messaging::RecordStore>(messaging::RecordStore::open(so));
  }
  train::TrainableLlama m = make_policy(4);
  TempDir t;
  std::shared_ptr<const PolicyModel> policy;
  std::shared_ptr<messaging::RecordStore> store;
};

inline void store_samples(messaging::RecordStore& store, const std::vector<TttSample>& samples, uint32_t worker,
                          uint64_t first_seq) {
  std::vector<messaging::EncodedMessage> msgs;
  std::vector<messaging::RecordStore::Item> items;
  for (size_t i = 0; i < samples.size(); ++i) {
    messaging::RecordData r = to_record(samples[i]);
    r.worker = worker;
    r.seq = first_seq + i;
    msgs.push_back(messaging::encode_record(r));
    const messaging::Verdict v = messaging::validate_record(msgs.back().data(), msgs.back().size());
    ASSERT_TRUE(v.ok()) << v.detail;
    items.push_back({v.header, msgs.back().data(), msgs.back().size()});
  }
  store.write(items);
}

}  // namespace updraft::testing_online
