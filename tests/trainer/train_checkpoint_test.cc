// Training checkpoints: bit-identical resume, the documented file format, damaged checkpoints
// rejected with an Error naming the file and tensor while leaving the loaded-into state untouched,
// and a crash at every stage of a save leaving the old or the new checkpoint.
#include "trainer/train_checkpoint.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "kernels/core/device.h"
#include "kernels/io/safetensors.h"
#include "kernels/io/sha256.h"
#include "kernels/ops/optim.h"
#include "tests/trainer/optim_fixture.h"
#include "trainer/adamw.h"
#include "trainer/params.h"

namespace updraft::train {
namespace {

using namespace testing_optim;

// ---- checkpoints --------------------------------------------------------------------------------

class TrainCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("upd_optim_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A regression net trained `steps` steps, with its optimiser.
  struct Run {
    std::unique_ptr<Net> net;
    std::unique_ptr<AdamW> opt;
  };
  Run trained(int64_t steps) {
    Run r{make_regression_net(5), nullptr};
    r.opt = std::make_unique<AdamW>(r.net->set, regression_adamw());
    train(*r.net, *r.opt, LrSchedule(regression_schedule()), 0, steps);
    return r;
  }
  TrainState state_at(int64_t step) const {
    const json user = {{"rng", {{"seed", 1234}, {"offset", 17 * step}}}, {"cursor", "shard-3:" + std::to_string(step)}};
    return {.step = step, .schedule = regression_schedule(), .user = user};
  }
  std::string ckpt() const { return (dir_ / "ckpt").string(); }
  fs::path dir_;
};

TEST_F(TrainCheckpointTest, ResumeIsBitIdentical) {
  constexpr int64_t kSteps = 30;
  Run straight = trained(kSteps);

  Run first = trained(kSteps / 2);
  save_train_checkpoint(ckpt(), first.net->set, *first.opt, state_at(kSteps / 2));

  // A fresh process's worth of objects: different initial weights, a zero optimiser.
  auto net = make_regression_net(99);
  AdamW opt(net->set, AdamWOptions{});
  const TrainState st = load_train_checkpoint(ckpt(), net->set, opt);
  EXPECT_EQ(st.step, kSteps / 2);
  EXPECT_EQ(st.user, state_at(kSteps / 2).user);
  EXPECT_EQ(st.schedule.total_steps, regression_schedule().total_steps);
  EXPECT_EQ(opt.options().beta2, regression_adamw().beta2);
  EXPECT_EQ(snapshot(*net, opt), snapshot(*first.net, *first.opt));
  train(*net, opt, LrSchedule(st.schedule), st.step, kSteps);

  EXPECT_EQ(snapshot(*net, opt), snapshot(*straight.net, *straight.opt));
  EXPECT_EQ(opt.steps(), kSteps);
}

TEST_F(TrainCheckpointTest, FilesFollowTheDocumentedFormat) {
  Run r = trained(3);
  save_train_checkpoint(ckpt() + "/", r.net->set, *r.opt, state_at(3));  // a trailing slash is fine
  const fs::path d = ckpt();
  std::set<std::string> listing;
  for (const auto& e : fs::directory_iterator(d))
    listing.insert(e.path().filename().string());
  EXPECT_EQ(listing, (std::set<std::string>{"model.safetensors", "optimizer.safetensors", "trainer_state.json"}));

  const json doc = json::parse(read_text(d / "trainer_state.json"));
  EXPECT_EQ(doc["format"], "updraft.train_checkpoint");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["step"], 3);
  EXPECT_EQ(doc["optimizer"]["type"], "adamw");
  EXPECT_EQ(doc["optimizer"]["steps"], 3);
  EXPECT_EQ(doc["optimizer"]["beta2"].get<double>(), 0.95);
  EXPECT_EQ(doc["schedule"]["decay"], "cosine");
  EXPECT_EQ(doc["schedule"]["warmup_steps"], 4);
  EXPECT_EQ(doc["params"]["count"], 2);
  EXPECT_EQ(doc["params"]["numel"], kOut * kIn + kOut);
  EXPECT_EQ(doc["user"], state_at(3).user);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(doc["files"][f]["sha256"], sha256_file_hex((d / f).string())) << f;
    EXPECT_EQ(doc["files"][f]["bytes"], fs::file_size(d / f)) << f;
  }
  json body = doc;
  body.erase("state_sha256");
  EXPECT_EQ(doc["state_sha256"], sha256_hex(body.dump()));

  const SafetensorsFile model = SafetensorsFile::open((d / "model.safetensors").string());
  EXPECT_EQ(model.names(), (std::vector<std::string>{"layers.0.proj.bias", "layers.0.proj.weight"}));
  EXPECT_EQ(bits(model.get("layers.0.proj.weight")), bits(r.net->owned[0]->value));
  const SafetensorsFile moments = SafetensorsFile::open((d / "optimizer.safetensors").string());
  EXPECT_EQ(moments.names(),
            (std::vector<std::string>{"exp_avg.layers.0.proj.bias", "exp_avg.layers.0.proj.weight",
                                      "exp_avg_sq.layers.0.proj.bias", "exp_avg_sq.layers.0.proj.weight"}));
  EXPECT_EQ(bits(moments.get("exp_avg_sq.layers.0.proj.bias")), bits(r.opt->exp_avg_sq(1)));
  EXPECT_EQ(moments.info("exp_avg.layers.0.proj.weight").dtype, DType::F32);
}

TEST_F(TrainCheckpointTest, ReplacesAnOlderCheckpointAndLeavesNoLeftovers) {
  Run r = trained(2);
  save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(2));
  train(*r.net, *r.opt, LrSchedule(regression_schedule()), 2, 6);
  for (bool exchange : {true, false}) {
    CheckpointSaveOptions o;
    o.use_rename_exchange = exchange;
    save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(6), o);
    auto net = make_regression_net(1);
    AdamW opt(net->set, AdamWOptions{});
    EXPECT_EQ(load_train_checkpoint(ckpt(), net->set, opt).step, 6);
    EXPECT_EQ(snapshot(*net, opt), snapshot(*r.net, *r.opt));
    EXPECT_FALSE(fs::exists(ckpt() + ".tmp"));
    EXPECT_FALSE(fs::exists(ckpt() + ".prev"));
  }
}

TEST_F(TrainCheckpointTest, RefusesToReplaceADirectoryThatIsNotACheckpoint) {
  fs::create_directories(ckpt());
  write_text(fs::path(ckpt()) / "notes.txt", "keep me");
  Run r = trained(1);
  EXPECT_THROW(save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(1)), Error);
  EXPECT_EQ(read_text(fs::path(ckpt()) / "notes.txt"), "keep me");
}

// Loading a damaged checkpoint throws an Error naming the file (and tensor) and leaves the
// target's weights and optimiser state exactly as they were.
class DamagedCheckpointTest : public TrainCheckpointTest {
 protected:
  void SetUp() override {
    TrainCheckpointTest::SetUp();
    Run r = trained(4);
    save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(4));
    target_ = trained(2);  // a live state that a failed load must not touch
  }
  // Saves a checkpoint of a different set of parameters into ckpt().
  void save_other(const std::function<void(Net&)>& build) {
    Net other;
    build(other);
    AdamW opt(other.set, AdamWOptions{});
    fs::remove_all(ckpt());
    save_train_checkpoint(ckpt(), other.set, opt, state_at(4));
  }
  void expect_rejected(const std::vector<std::string>& needles) {
    const Snapshot before = snapshot(*target_.net, *target_.opt);
    try {
      load_train_checkpoint(ckpt(), target_.net->set, *target_.opt);
      ADD_FAILURE() << "loaded a damaged checkpoint";
    } catch (const Error& e) {
      for (const std::string& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
    }
    EXPECT_EQ(snapshot(*target_.net, *target_.opt), before) << "a failed load changed the state";
  }
  fs::path file(const std::string& name) const { return fs::path(ckpt()) / name; }
  Run target_;
};

TEST_F(DamagedCheckpointTest, IntactLoads) {
  EXPECT_EQ(load_train_checkpoint(ckpt(), target_.net->set, *target_.opt).step, 4);
}

TEST_F(DamagedCheckpointTest, TruncatedModelFile) {
  fs::resize_file(file("model.safetensors"), fs::file_size(file("model.safetensors")) - 7);
  expect_rejected({"model.safetensors", "truncated"});
}

TEST_F(DamagedCheckpointTest, FlippedByteInOptimizerFile) {
  std::string bytes = read_text(file("optimizer.safetensors"));
  bytes[bytes.size() - 5] ^= 0x10;
  write_text(file("optimizer.safetensors"), bytes);
  expect_rejected({"optimizer.safetensors", "sha256"});
}

TEST_F(DamagedCheckpointTest, EditedOrTruncatedStateFile) {
  std::string text = read_text(file("trainer_state.json"));
  const size_t at = text.find("\"step\": 4");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 8] = '5';
  write_text(file("trainer_state.json"), text);
  expect_rejected({"trainer_state.json", "state_sha256"});
  write_text(file("trainer_state.json"), text.substr(0, text.size() / 2));
  expect_rejected({"trainer_state.json", "JSON"});
}

TEST_F(DamagedCheckpointTest, MissingFiles) {
  fs::remove(file("optimizer.safetensors"));
  expect_rejected({"optimizer.safetensors", "missing"});
  fs::remove(file("trainer_state.json"));
  expect_rejected({"trainer_state.json", "missing"});
  fs::remove_all(ckpt());
  expect_rejected({"ckpt", "no checkpoint"});
}

TEST_F(DamagedCheckpointTest, MissingTensor) {
  save_other([](Net& n) { n.add("layers.0.proj.weight", {kOut, kIn}); });
  expect_rejected({"model.safetensors", "'layers.0.proj.bias'", "missing"});
}

TEST_F(DamagedCheckpointTest, WrongShape) {
  save_other([](Net& n) {
    n.add("layers.0.proj.weight", {kIn, kOut});
    n.add("layers.0.proj.bias", {kOut}, false);
  });
  expect_rejected({"model.safetensors", "'layers.0.proj.weight'", "[3,4]", "[4,3]"});
}

TEST_F(DamagedCheckpointTest, ExtraTensor) {
  save_other([](Net& n) {
    n.add("layers.0.proj.weight", {kOut, kIn});
    n.add("layers.0.proj.bias", {kOut}, false);
    n.add("layers.1.proj.weight", {2});
  });
  expect_rejected({"model.safetensors", "'layers.1.proj.weight'"});
}

TEST_F(DamagedCheckpointTest, WrongDtype) {
  const SafetensorsFile model = SafetensorsFile::open(file("model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : model.names())
    tensors.emplace_back(n, n == "layers.0.proj.bias" ? model.get(n).to_dtype(DType::BF16) : model.get(n));
  save_safetensors(file("model.safetensors").string(), tensors);
  reseal(ckpt(), "model.safetensors");
  expect_rejected({"model.safetensors", "'layers.0.proj.bias'", "bf16"});
}

TEST_F(DamagedCheckpointTest, MissingMoment) {
  const SafetensorsFile moments = SafetensorsFile::open(file("optimizer.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : moments.names())
    if (n != "exp_avg_sq.layers.0.proj.weight")
      tensors.emplace_back(n, moments.get(n));
  save_safetensors(file("optimizer.safetensors").string(), tensors);
  reseal(ckpt(), "optimizer.safetensors");
  expect_rejected({"optimizer.safetensors", "'exp_avg_sq.layers.0.proj.weight'", "missing"});
}

// A save killed after each of its stages (a child process that _exits there, the way a crash
// would: no destructors, no cleanup) leaves <dir> loadable as the old or the new checkpoint,
// never a mix; the next save then completes and tidies up.
TEST_F(TrainCheckpointTest, CrashAtEveryStageLeavesOldOrNew) {
  Run r = trained(3);
  const Snapshot old_state = snapshot(*r.net, *r.opt);
  Run r2 = trained(7);
  const Snapshot new_state = snapshot(*r2.net, *r2.opt);

  for (bool have_old : {true, false}) {
    for (bool exchange : {true, false}) {
      // The stages train_checkpoint.h lists; a child that never reaches one fails below.
      std::vector<std::string> stages = {"tmp_created",   "model_written", "optimizer_written",
                                         "state_written", "swapped",       "done"};
      if (have_old && !exchange)
        stages.insert(stages.begin() + 4, "old_moved");
      bool swapped = false;
      for (const std::string& stage : stages) {
        SCOPED_TRACE("old " + std::to_string(have_old) + ", exchange " + std::to_string(exchange) + ", crash after " +
                     stage);
        swapped = swapped || stage == "swapped";
        fs::remove_all(ckpt());
        fs::remove_all(ckpt() + ".tmp");
        fs::remove_all(ckpt() + ".prev");
        if (have_old)
          save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(3));

        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
          CheckpointSaveOptions crash;
          crash.use_rename_exchange = exchange;
          crash.after_stage = [&](const std::string& s) {
            if (s == stage)
              ::_exit(0);
          };
          try {
            save_train_checkpoint(ckpt(), r2.net->set, *r2.opt, state_at(7), crash);
          } catch (...) {
            ::_exit(2);
          }
          ::_exit(3);
        }
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;

        auto net = make_regression_net(1);
        AdamW opt(net->set, AdamWOptions{});
        if (!have_old && !swapped) {
          EXPECT_THROW(load_train_checkpoint(ckpt(), net->set, opt), Error) << "nothing was published yet";
        } else {
          const int64_t step = load_train_checkpoint(ckpt(), net->set, opt).step;
          EXPECT_EQ(step, swapped ? 7 : 3);
          EXPECT_EQ(snapshot(*net, opt), swapped ? new_state : old_state);
        }

        // The next save finishes the job and leaves only the checkpoint.
        save_train_checkpoint(ckpt(), r2.net->set, *r2.opt, state_at(7));
        EXPECT_EQ(load_train_checkpoint(ckpt(), net->set, opt).step, 7);
        EXPECT_FALSE(fs::exists(ckpt() + ".tmp"));
        EXPECT_FALSE(fs::exists(ckpt() + ".prev"));
      }
      EXPECT_TRUE(swapped);
    }
  }
}

}  // namespace
}  // namespace updraft::train
