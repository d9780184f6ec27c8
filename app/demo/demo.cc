#include "app/demo/demo.h"

#include <omp.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>

#include "app/demo/report.h"
#include "kernels/core/error.h"
#include "kernels/io/atomic_file.h"
#include "kernels/io/weight_version.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/sampling.h"
#include "messaging/buffer_server.h"
#include "messaging/record_sender.h"
#include "messaging/record_store.h"
#include "messaging/weight_link.h"
#include "messaging/zmq_util.h"
#include "rollout/tokenizer.h"
#include "app/worker_role.h"
#include "rollout/worker/worker.h"
#include "rollout/capture/capture.h"
#include "rollout/capture/record_convert.h"
#include "trainer/corpus.h"
#include "trainer/draft_train.h"
#include "trainer/grpo.h"
#include "trainer/online/online_trainer.h"
#include "trainer/pretrain.h"
#include "trainer/train_once.h"

#ifndef UPDRAFT_SOURCE_DIR
#define UPDRAFT_SOURCE_DIR "."
#endif

namespace updraft::demo {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool is_curriculum(const DemoOptions& o) { return o.domain.find('>') != std::string::npos; }

// The policy and initial drafter the demo runs on: the ones given, else the built-in small
// policy and its drafter shipped in models/, else the tiny preset trained here (seconds).
struct Models {
  std::string policy, drafter, name;
};

Models resolve_models(const DemoOptions& o) {
  Models m;
  const fs::path shipped = fs::path(UPDRAFT_SOURCE_DIR) / "models";
  if (!o.model_dir.empty()) {
    m.policy = o.model_dir;
    m.name = fs::path(o.model_dir).filename().string();
  } else if (fs::exists(shipped / "small" / "config.json")) {
    m.policy = (shipped / "small").string();
    m.name = "built-in small";
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

// One generation phase: the requests split round-robin over the workers, run in parallel.
struct Phase {
  std::vector<BatchReport> batches;        // per worker
  std::vector<const Completion*> ordered;  // completion of request i
  SpecStats spec, probe_spec;  // every round; the probe requests' (full settings)
  int64_t tokens = 0;
  double seconds = 0;
  uint64_t drafter_version = 0;
};

// Request i goes to worker (i / group) % W: a group's siblings (consecutive requests) to one
// worker, as a prefix-aware router places them, so that they can draft for one another.
Phase run_phase(std::vector<std::unique_ptr<Worker>>& workers, const std::vector<GenRequest>& reqs, GenMode mode,
                int threads_per_worker, size_t group) {
  const size_t W = workers.size();
  auto worker_of = [&](size_t i) { return (i / group) % W; };
  Phase ph;
  ph.batches.resize(W);
  std::vector<std::vector<GenRequest>> parts(W);
  for (size_t i = 0; i < reqs.size(); ++i)
    parts[worker_of(i)].push_back(reqs[i]);
  std::vector<std::exception_ptr> errors(W);
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < W; ++w)
    threads.emplace_back([&, w] {
      try {
        if (!parts[w].empty())
          ph.batches[w] = workers[w]->generate(parts[w], mode);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  ph.seconds = since(t0);
  for (auto& e : errors)
    if (e)
      std::rethrow_exception(e);
  ph.ordered.resize(reqs.size());
  std::vector<size_t> next(W, 0);
  for (size_t i = 0; i < reqs.size(); ++i)
    ph.ordered[i] = &ph.batches[worker_of(i)].completions[next[worker_of(i)]++];
  for (const BatchReport& b : ph.batches) {
    ph.spec.merge(b.spec);
    ph.probe_spec.merge(b.probe_spec);
    ph.tokens += b.generated_tokens;
    ph.drafter_version = std::max(ph.drafter_version, b.drafter_version);
  }
  return ph;
}

// Seconds the workers spent turning completions into records (inside generation), the most
// of any worker: they ran in parallel.
double record_seconds(const std::vector<std::unique_ptr<Worker>>& workers) {
  double most = 0;
  for (const auto& w : workers)
    most = std::max(most, w->metrics().records.seconds);
  return most;
}

struct Measured {
  SpecStats spec;
  int64_t tokens = 0;
  double seconds = 0;
};

// One engine run over reqs (the drafter at the full settings, or with adaptive depth).
Measured measure(const PolicyModel& policy, const DraftModel* drafter, const std::vector<GenRequest>& reqs,
                 const EngineOptions& eo, bool adaptive = false) {
  Engine e(policy, eo, drafter);
  AdaptiveDepth chooser(eo.spec);
  if (adaptive)
    e.set_depth_chooser(&chooser);
  for (GenRequest r : reqs) {
    r.speculate = drafter != nullptr;
    e.submit(std::move(r));
  }
  const auto t0 = Clock::now();
  Measured m;
  for (const GenResult& r : e.run())
    m.tokens += static_cast<int64_t>(r.tokens.size());
  m.seconds = since(t0);
  m.spec = e.stats().spec;
  return m;
}

// The RL prompts' domains: one mix for the whole run, or a two-stage curriculum "A>B" (stage A
// before switch_step, B from it on).
struct Schedule {
  corpus::Mix first, second;
  std::string first_name, second_name;
  int64_t switch_step = 0;  // 0-based step index of the first B step; == steps without a curriculum
  const corpus::Mix& at(int64_t step) const { return step < switch_step ? first : second; }
};

corpus::Mix mix_of(const std::string& name) {
  if (name == "mix")
    return corpus::Mix{};
  if (name != "arith" && name != "code")
    throw Error("demo: --domain takes mix, arith, code or a curriculum A>B of two of them, not '" + name + "'");
  return corpus::Mix::only(corpus::domain_from_name(name));
}

Schedule parse_schedule(const DemoOptions& o) {
  Schedule sc;
  const size_t gt = o.domain.find('>');
  sc.first_name = o.domain.substr(0, gt);
  sc.second_name = gt == std::string::npos ? sc.first_name : o.domain.substr(gt + 1);
  sc.first = mix_of(sc.first_name);
  sc.second = mix_of(sc.second_name);
  if (gt == std::string::npos) {
    sc.switch_step = o.steps;
  } else {
    if (sc.first_name == sc.second_name)
      throw Error("demo: a curriculum needs two different domains, not '" + o.domain + "'");
    sc.switch_step = o.switch_step > 0 ? o.switch_step : std::max<int64_t>(1, o.steps / 4);
    if (sc.switch_step >= o.steps)
      throw Error("demo: --switch-step must be below --steps");
  }
  return sc;
}

void check_options(const DemoOptions& o) {
  if (o.steps < 1 || o.prompts_per_step < 1 || o.group < 2 || o.max_new_tokens < 1 || o.workers < 1 ||
      o.spec_steps < 1 || o.spec_top_k < 1 || o.worker_batch < 0 || o.trainer_steps_per_round < 1 || o.final_prompts < 1 ||
      o.offline_prompts < 2 || o.offline_steps < 1 || !(o.rl_lr >= 0) || !(o.trainer_lr > 0) ||
      o.window_versions < 1 || !(o.trainer_share >= 0))
    throw Error("demo: steps, prompts, max-new-tokens, workers, spec settings and trainer steps must be >= 1, "
                "group >= 2 (GRPO compares responses within a group), learning rates positive");
  (void)parse_schedule(o);  // throws on a bad --domain
}

int run_with_buffer(const DemoOptions& o, const std::string& buffer_dir);

}  // namespace

int run_demo(const DemoOptions& o) {
  check_options(o);
  fs::create_directories(o.out_dir);
  // The buffer: RocksDB in a temporary directory (or OUT/buffer with --keep-buffer).
  std::string buffer_dir;
  if (o.keep_buffer) {
    buffer_dir = (fs::path(o.out_dir) / "buffer").string();
    fs::remove_all(buffer_dir);
  } else {
    std::string tmpl = (fs::temp_directory_path() / "updraft-demo-buffer-XXXXXX").string();
    UPD_REQUIRE(::mkdtemp(tmpl.data()) != nullptr) << "demo: cannot create a temporary directory";
    buffer_dir = tmpl;
  }
  struct Cleanup {
    std::string dir;
    bool keep;
    ~Cleanup() {
      std::error_code ec;
      if (!keep)
        fs::remove_all(dir, ec);
    }
  } cleanup{buffer_dir, o.keep_buffer};
  return run_with_buffer(o, buffer_dir);
}

namespace {

int run_with_buffer(const DemoOptions& o, const std::string& buffer_dir) {
  const auto t_start = Clock::now();
  const Models models = resolve_models(o);
  const Tokenizer tok = Tokenizer::load(models.policy);
  auto policy0 = std::make_shared<const PolicyModel>(PolicyModel::load(models.policy));
  auto draft0 = std::make_shared<const DraftModel>(DraftModel::load(models.drafter, policy0->draft_target()));
  train::TrainableLlama master = train::TrainableLlama::load_hf(models.policy);
  train::AdamWOptions ao;
  ao.beta2 = 0.99;
  ao.weight_decay = 0.0;
  train::AdamW opt(master.params(), ao);
  const PolicyConfig& pc = policy0->config();
  spdlog::info(
      "demo: policy {} ({} layers x {}, vocab {}), drafter {} (vocab {}), {} RL steps of {} prompts x {}; cpu bf16 "
      "kernel {}",
      models.name, pc.num_layers, pc.hidden_size, pc.vocab_size, models.drafter, draft0->config().draft_vocab_size,
      o.steps, o.prompts_per_step, o.group, ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()));

  // Versions (published policies and drafters) live in the output directory, fresh each run.
  const fs::path versions = fs::path(o.out_dir) / "versions";
  fs::remove_all(versions);
  fs::create_directories(versions);

  // The buffer, served over inproc ZeroMQ.
  messaging::StoreOptions so;
  so.path = buffer_dir;
  so.version_window = std::max<uint64_t>(o.window_versions + 1, 4);
  auto store = std::shared_ptr<messaging::RecordStore>(messaging::RecordStore::open(so));
  messaging::ZmqContext zctx;
  messaging::BufferServerOptions bo;
  bo.endpoints = {"inproc://updraft-demo-buffer"};
  bo.zmq_context = zctx.get();
  auto server = std::make_unique<messaging::BufferServer>(bo, store);

  // Workers.
  const int cores = std::max(1, omp_get_max_threads());
  const int threads_per_worker = std::max(1, cores / static_cast<int>(o.workers));
  EngineOptions eo;
  eo.spec = SpecSettings{o.spec_steps, o.spec_top_k, o.spec_draft_tokens > 0 ? o.spec_draft_tokens : o.spec_steps + 1};
  eo.max_batch = o.worker_batch > 0 ? o.worker_batch : o.prompts_per_step * o.group;
  eo.suffix.mode = parse_suffix_mode(o.suffix_drafts);  // the workers' serving engines only
  std::vector<std::shared_ptr<messaging::RecordSender>> senders;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int64_t w = 0; w < o.workers; ++w) {
    messaging::SenderOptions sopt;
    sopt.endpoint = bo.endpoints[0];
    sopt.worker = static_cast<uint32_t>(w + 1);
    sopt.model = record_model(pc, eo, draft0.get());  // the buffer refuses records inconsistent with it
    sopt.zmq_context = zctx.get();
    senders.push_back(std::make_shared<messaging::RecordSender>(sopt));
    WorkerOptions wo;
    wo.id = static_cast<uint32_t>(w + 1);
    wo.engine = eo;
    wo.threads = threads_per_worker;
    wo.adaptive.enabled = o.adaptive_spec;

    wo.scorer = teacher_forced_scorer();
    wo.record_rate = o.record_rate;
    wo.record_max_tokens = o.record_max_tokens;
    workers.push_back(std::make_unique<Worker>(wo, policy0, 1, draft0, 1, senders.back()));
    workers.back()->set_reference_drafter(draft0, 1);
  }

  // The weight link: versions are announced on it; each worker's subscriber offers them to the
  // worker's hot-swap path (reading the shared directory, or fetching chunks with --fetch-weights).
  messaging::WeightPublisherOptions wpo;
  wpo.zmq_context = zctx.get();
  wpo.pub_endpoint = "inproc://updraft-demo-weights-pub";
  wpo.request_endpoint = "inproc://updraft-demo-weights-req";
  messaging::WeightPublisher weights(wpo);
  std::vector<std::unique_ptr<messaging::WeightSubscriber>> subscribers;
  for (size_t w = 0; w < workers.size(); ++w) {
    messaging::WeightSubscriberOptions wso;
    wso.zmq_context = zctx.get();
    wso.pub_endpoint = weights.pub_endpoint();
    wso.request_endpoint = weights.request_endpoint();
    wso.min_version[0] = wso.min_version[1] = 1;  // the initial versions are loaded already
    wso.prefer_transfer = o.fetch_weights;
    wso.local_root = (fs::path(o.out_dir) / ("worker-" + std::to_string(w + 1) + "-weights")).string();
    fs::remove_all(wso.local_root);
    subscribers.push_back(follow_weight_link(*workers[w], wso));
  }

  // The online trainer; promoted drafters are announced to every worker.
  std::mutex promoted_mu;
  std::vector<uint64_t> promoted_now;
  train::OnlineTrainerOptions to;
  to.dir = versions.string();
  to.window_versions = o.window_versions;
  // Records per RL step: one per online completion at record_rate 1 (long ones split further).
  const auto records_per_step = std::max<int64_t>(
      1, static_cast<int64_t>(std::llround(static_cast<double>(o.prompts_per_step * o.group) * o.record_rate)));
  to.window_records = static_cast<size_t>(records_per_step * static_cast<int64_t>(o.window_versions));
  to.steps_per_round = o.trainer_steps_per_round;
  to.lr = o.trainer_lr;
  to.min_new_records = static_cast<uint64_t>(std::max<int64_t>(1, records_per_step / 2));
  to.seed = o.seed;
  to.progress = [](const std::string& l) { spdlog::info("{}", l); };
  to.on_promote = [&](const WeightVersion& v) {
    weights.announce(v.dir, messaging::WeightKind::kDrafter,
                     {{"heldout_tau_estimate", v.meta.value("heldout_tau_estimate", 0.0)}});
    std::lock_guard<std::mutex> lock(promoted_mu);
    promoted_now.push_back(v.version);
  };
  train::OnlineTrainer trainer(to, store, policy0, 1, *draft0, 1);
  trainer.set_paused(true);
  trainer.start();

  const Schedule schedule = parse_schedule(o);
  if (is_curriculum(o))
    spdlog::info("demo: curriculum: {} prompts for steps 1-{}, then {} prompts", schedule.first_name,
                 schedule.switch_step, schedule.second_name);
  // Requests of step `step` (the final comparison uses the last stage): the same for all runs.
  auto make_requests = [&](int64_t step, uint64_t offset, int64_t prompts, std::vector<corpus::Sample>* samples) {
    *samples = corpus::make_samples(schedule.at(step), corpus::Split::kRl, static_cast<size_t>(prompts), o.seed, offset);
    std::vector<GenRequest> reqs;
    for (size_t i = 0; i < samples->size(); ++i)
      for (int64_t g = 0; g < o.group; ++g) {
        GenRequest r;
        r.prompt = tok.encode((*samples)[i].prompt);
        r.params.temperature = 1.0f;
        r.params.max_new_tokens = o.max_new_tokens;
        r.params.has_seed = true;
        r.params.seed = ops::mix64(o.seed ^ ops::mix64(offset * 1000003 + i * 131 + static_cast<uint64_t>(g)));
        reqs.push_back(std::move(r));
      }
    return reqs;
  };

  std::vector<StepRecord> steps;
  std::shared_ptr<const PolicyModel> current_policy = policy0;
  std::string current_policy_dir = models.policy;
  for (int64_t s = 0; s < o.steps; ++s) {
    StepRecord rec;
    rec.step = s + 1;
    std::vector<corpus::Sample> samples;
    const std::vector<GenRequest> reqs =
        make_requests(s, static_cast<uint64_t>(s * o.prompts_per_step), o.prompts_per_step, &samples);

    // Generation: the trainer is paused; the three runs see the same policy version. Their order
    // rotates every step, so that no mode always runs first after the update (cold caches).
    const double record_s0 = record_seconds(workers);
    Phase online, frozen, plain;
    const GenMode modes[3] = {GenMode::kServing, GenMode::kReference, GenMode::kPlain};
    Phase* phases[3] = {&online, &frozen, &plain};
    for (int64_t k = 0; k < 3; ++k) {
      const int64_t m = (k + s) % 3;
      *phases[m] = run_phase(workers, reqs, modes[m], threads_per_worker, static_cast<size_t>(o.group));
    }
    // The online drafter's acceptance at the full settings, as the frozen one's is measured (the
    // adaptive depths of the online run change where rounds start): every fourth request again.
    std::vector<GenRequest> every4;
    for (size_t i = 0; i < reqs.size(); i += 4)
      every4.push_back(reqs[i]);
    const Phase full = run_phase(workers, every4, GenMode::kFull, threads_per_worker, 1);
    rec.policy_version = online.batches[0].policy_version;
    rec.drafter_version = online.drafter_version;
    rec.domain = s < schedule.switch_step ? schedule.first_name : schedule.second_name;
    rec.tau_online = full.spec.tau();  // full settings, comparable with tau_frozen
    int64_t speculated = 0;
    double depth_sum = 0;
    for (const BatchReport& b : online.batches) {
      speculated += b.speculated;
      depth_sum += b.mean_depth * static_cast<double>(b.completions.size());
    }
    rec.spec_share = static_cast<double>(speculated) / static_cast<double>(reqs.size());
    rec.mean_depth = depth_sum / static_cast<double>(reqs.size());
    SpecStats frozen_subset;  // the frozen drafter on the same requests as the online one's tau
    for (size_t i = 0; i < reqs.size(); i += 4)
      frozen_subset.merge(frozen.ordered[i]->result.spec);
    rec.tau_frozen = frozen_subset.tau();
    rec.rounds_online = online.spec.rounds;
    for (size_t k = 0; k < rec.accepted_by.size(); ++k)
      rec.accepted_by[k] = online.spec.accepted_by[k];
    rec.gen_online_s = online.seconds;
    rec.gen_frozen_s = frozen.seconds;
    rec.gen_plain_s = plain.seconds;
    rec.tokens_online = online.tokens;
    rec.tokens_plain = plain.tokens;
    rec.tps_online = online.tokens / online.seconds;
    rec.tps_frozen = frozen.tokens / frozen.seconds;
    rec.tps_plain = plain.tokens / plain.seconds;
    rec.capture_s = record_seconds(workers) - record_s0;

    // Rewards and the GRPO update on the online run's rollouts.
    std::vector<train::GrpoSample> gs;
    int64_t formatted = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const GenResult& g = online.ordered[i]->result;
      const size_t prompt_index = i / static_cast<size_t>(o.group);
      const double r = corpus::reward(samples[prompt_index], tok.decode(g.tokens, true));
      formatted += r > 0;
      rec.reward += r;
      gs.push_back({g.prompt, g.tokens, r, static_cast<int64_t>(prompt_index)});
    }
    rec.reward /= static_cast<double>(reqs.size());
    rec.format_rate = static_cast<double>(formatted) / static_cast<double>(reqs.size());
    const auto t_up = Clock::now();
    const train::GrpoStats st = train::grpo_step(master, opt, gs, o.rl_lr);
    rec.grad_norm = st.grad_norm;
    rec.nll = st.mean_nll;
    const uint64_t next_version = rec.policy_version + 1;
    const WeightVersion pv = publish_version(
        versions.string(), "policy", next_version, [&](const std::string& d) { master.save_hf(d, DType::BF16); },
        {{"rl_step", s + 1}, {"mean_reward", rec.reward}});
    weights.announce(pv.dir, messaging::WeightKind::kPolicy, {{"rl_step", static_cast<double>(s + 1)}, {"mean_reward", rec.reward}});
    for (const auto& sub : subscribers)
      UPD_REQUIRE(sub->wait_delivered(messaging::WeightKind::kPolicy, next_version, std::chrono::seconds(60)))
          << "demo: a worker did not receive policy v" << next_version << " (" << sub->stats().last_failure << ")";
    current_policy = std::make_shared<const PolicyModel>(PolicyModel::load(pv.dir));
    current_policy_dir = pv.dir;
    trainer.notify_policy(current_policy, next_version);
    rec.update_s = since(t_up);
    if (next_version >= 4)  // workers and trainer hold what they serve; old files can go
      fs::remove_all(versions / version_dir_name("policy", next_version - 3));
    for (auto& snd : senders)
      snd->flush(std::chrono::milliseconds(10000));
    rec.records_acked = static_cast<int64_t>(server->metrics().records_stored.load());
    // The trainer's slot (see demo.h): until it is idle or its share of the step is used.
    trainer.set_paused(false);
    const auto t_slot = Clock::now();
    const double budget = o.trainer_share * rec.gen_online_s;
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * to.poll_ms));  // let a due trigger fire
    while (since(t_slot) < budget && !trainer.idle())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    trainer.set_paused(true);
    rec.trainer_slot_s = since(t_slot);
    {
      std::lock_guard<std::mutex> lock(promoted_mu);
      rec.promoted = promoted_now;
      promoted_now.clear();
    }
    std::string promo;
    for (uint64_t v : rec.promoted)
      promo += " +drafter v" + std::to_string(v);
    spdlog::info(
        "demo: step {}/{} [{}]  policy v{}  reward {:.3f}  tau online {:.2f} (drafter v{}, {:.0f}% speculative, depth {:.1f}) vs frozen {:.2f}  tokens/s "
        "online {:.0f} frozen {:.0f} plain {:.0f}  speedup gen {:.2f}x step {:.2f}x  [update {:.1f} s, capture {:.1f} "
        "s, trainer {:.1f} s]{}",
        s + 1, o.steps, rec.domain, rec.policy_version, rec.reward, rec.tau_online, rec.drafter_version,
        100 * rec.spec_share, rec.mean_depth, rec.tau_frozen,
        rec.tps_online, rec.tps_frozen, rec.tps_plain, rec.gen_speedup(), rec.step_speedup(), rec.update_s,
        rec.capture_s, rec.trainer_slot_s, promo);
    steps.push_back(rec);
  }
  trainer.stop();
  {
    const messaging::WeightPublisherStats ps = weights.stats();
    uint64_t delivered = 0, fetched = 0, fetched_bytes = 0, failures = 0;
    for (const auto& sub : subscribers) {
      const messaging::WeightSubscriberStats ss = sub->stats();
      delivered += ss.delivered;
      fetched += ss.fetched;
      fetched_bytes += ss.fetched_bytes;
      failures += ss.failures;
    }
    spdlog::info("demo: weight link: {} versions announced, {} deliveries to {} workers ({} fetched as chunks, {:.1f} MB), {} failures",
                 ps.announcements, delivered, subscribers.size(), fetched, fetched_bytes / 1e6, failures);
    subscribers.clear();  // the workers hold what they serve; the fetched copies can go
    for (size_t w = 0; w < workers.size(); ++w)
      fs::remove_all(fs::path(o.out_dir) / ("worker-" + std::to_string(w + 1) + "-weights"));
  }

  Summary sum = summarize(steps);
  for (const train::RoundReport& r : trainer.reports())
    sum.promotions += r.promoted ? 1 : 0;
  // Drafters on the final policy, measured on the same held-out requests (RL prompts the run
  // never saw): the online drafter as it ended, the frozen one, and one trained offline.
  std::vector<corpus::Sample> final_samples;
  const std::vector<GenRequest> final_reqs =
      make_requests(o.steps, static_cast<uint64_t>(o.steps * o.prompts_per_step), o.final_prompts, &final_samples);
  const DraftTarget ft = current_policy->draft_target();
  const WeightVersion online_v = latest_version(versions.string(), "drafter");
  const DraftModel online_final = online_v.dir.empty() ? draft0->rebind(ft) : DraftModel::load(online_v.dir, ft);
  const DraftModel frozen_final = draft0->rebind(ft);
  EngineOptions meo = eo;
  meo.max_batch = static_cast<int64_t>(final_reqs.size());
  meo.suffix.mode = SuffixMode::kOff;  // the drafters' tau alone; the full-batch throughput below serves as workers do
  EngineOptions feo = meo;
  feo.suffix = eo.suffix;
  const Measured m_online = measure(*current_policy, &online_final, final_reqs, meo);
  const Measured m_adaptive = measure(*current_policy, &online_final, final_reqs, feo, o.adaptive_spec);
  const Measured m_plain = measure(*current_policy, nullptr, final_reqs, meo);
  sum.final_online_tau = m_online.spec.tau();
  sum.final_frozen_tau = measure(*current_policy, &frozen_final, final_reqs, meo).spec.tau();
  sum.full_batch = meo.max_batch;
  sum.full_batch_online_tps = m_adaptive.tokens / std::max(m_adaptive.seconds, 1e-9);
  sum.full_batch_plain_tps = m_plain.tokens / std::max(m_plain.seconds, 1e-9);
  if (o.offline_compare) {
    std::vector<corpus::Sample> off_samples =
        corpus::make_samples(schedule.at(o.steps), corpus::Split::kTrain, static_cast<size_t>(o.offline_prompts), o.seed + 7);
    std::vector<GenRequest> off_reqs;
    for (const auto& smp : off_samples) {
      GenRequest r;
      r.prompt = tok.encode(smp.prompt);
      r.params.temperature = 1.0f;
      r.params.max_new_tokens = o.max_new_tokens;
      off_reqs.push_back(std::move(r));
    }
    EngineOptions peo = eo;
    peo.max_batch = 64;
    peo.seed = o.seed + 11;
    Engine e(*current_policy, peo, nullptr);
    for (GenRequest r : off_reqs)
      e.submit(std::move(r));
    std::vector<Rollout> rollouts;
    for (const GenResult& g : e.run())
      if (!g.tokens.empty())
        rollouts.push_back({g.prompt, g.tokens});
    CaptureOptions co;
    co.aux_layers = draft0->aux_layers();
    std::vector<TttSample> data = capture_samples(*current_policy, rollouts, co, 0);
    const size_t n_held = std::max<size_t>(1, data.size() / 10);
    train::InMemoryDataset held(std::vector<TttSample>(data.end() - static_cast<std::ptrdiff_t>(n_held), data.end()));
    data.resize(data.size() - n_held);
    train::InMemoryDataset train_set(std::move(data));
    // The initial drafter trained on the final policy's rollouts, as many optimiser steps as the
    // online trainer took over the whole run (at least offline_steps): the same start and budget,
    // data from exactly the distribution being measured.
    int64_t online_steps = 0;
    for (const train::RoundReport& r : trainer.reports())
      online_steps += r.train_records > 0 ? o.trainer_steps_per_round : 0;
    const int64_t off_steps = std::max(o.offline_steps, online_steps);
    spdlog::info("demo: offline drafter: {} rollouts of the final policy, {} steps from the initial drafter",
                 train_set.size() + held.size(), off_steps);
    train::TrainableDraft off(*draft0, ft);
    train::DraftTrainOptions dto;
    dto.steps = off_steps;
    dto.lr = o.trainer_lr;
    dto.warmup_steps = 0;
    dto.eval_every = 0;
    dto.seed = o.seed;
    train::train_drafter(off, train_set, held, dto);
    const DraftModel offline_final = off.to_draft();
    sum.final_offline_tau = measure(*current_policy, &offline_final, final_reqs, meo).spec.tau();
    sum.vs_offline = sum.final_offline_tau > 0 ? sum.final_online_tau / sum.final_offline_tau : 0.0;
  }

  for (auto& w : workers) {
    const WorkerMetrics m = w->metrics();
    sum.drafter_swaps += m.drafter_swaps;
    sum.policy_swaps += m.policy_swaps;
    sum.rejected += m.rejected_drafter + m.rejected_policy;
    sum.rollbacks += m.rollbacks;
    sum.completions_unrecorded += m.records.unrecorded;
    sum.record_chunks += m.records.chunks;
  }
  sum.records_stored = static_cast<int64_t>(server->metrics().records_stored.load());
  sum.seconds = since(t_start);

  // Report.
  nlohmann::json js = nlohmann::json::array();
  for (const StepRecord& r : steps)
    js.push_back(step_json(r));
  const bool drift_ok = sum.drift >= 0.15, adapt_ok = sum.adapt_ratio >= 1.15,
             offline_ok = !o.offline_compare || sum.vs_offline >= 0.9, speed_ok = sum.step_speedup > 1.0;
  const nlohmann::json report = {
      {"policy", models.policy},
      {"initial_drafter", models.drafter},
      {"options",
       {{"steps", o.steps},
        {"prompts_per_step", o.prompts_per_step},
        {"group", o.group},
        {"max_new_tokens", o.max_new_tokens},
        {"rl_lr", o.rl_lr},
        {"domain", o.domain},
        {"workers", o.workers},
        {"worker_batch", eo.max_batch},
        {"spec", {{"steps", o.spec_steps}, {"top_k", o.spec_top_k}, {"draft_tokens", eo.spec.draft_tokens}}},
        {"trainer",
         {{"steps_per_round", o.trainer_steps_per_round}, {"lr", o.trainer_lr}, {"share", o.trainer_share}}},
        {"record_rate", o.record_rate},
        {"record_max_tokens", o.record_max_tokens},
        {"seed", o.seed}}},
      {"machine", {{"cores", cores}}},
      {"steps", js},
      {"summary",
       {{"frozen_tau_first_quarter", sum.frozen_tau_first_quarter},
        {"frozen_tau_last_quarter", sum.frozen_tau_last_quarter},
        {"drift", sum.drift},
        {"online_tau_second_half", sum.online_tau_second_half},
        {"frozen_tau_second_half", sum.frozen_tau_second_half},
        {"online_over_frozen", sum.adapt_ratio},
        {"final_tau", {{"online", sum.final_online_tau}, {"frozen", sum.final_frozen_tau}, {"offline", sum.final_offline_tau}}},
        {"online_over_offline", sum.vs_offline},
        {"generation_speedup", sum.gen_speedup},
        {"step_speedup", sum.step_speedup},
        {"generation_share_of_step", sum.gen_share},
        {"suffix_drafts", o.suffix_drafts},
        {"online_accepted_per_round",
         {{"drafter", sum.accepted_per_round[0]},
          {"group", sum.accepted_per_round[1]},
          {"history", sum.accepted_per_round[2]}}},
        {"full_batch",
         {{"batch", sum.full_batch},
          {"plain_tokens_per_s", sum.full_batch_plain_tps},
          {"online_tokens_per_s", sum.full_batch_online_tps}}},
        {"reward_first_quarter", sum.reward_first},
        {"reward_last_quarter", sum.reward_last},
        {"drafters_promoted", sum.promotions},
        {"drafter_swaps", sum.drafter_swaps},
        {"policy_swaps", sum.policy_swaps},
        {"rejected_versions", sum.rejected},
        {"rollbacks", sum.rollbacks},
        {"records_stored", sum.records_stored},
        {"completions_unrecorded", sum.completions_unrecorded},
        {"record_chunks", sum.record_chunks},
        {"seconds", sum.seconds}}},
      {"checks",
       {{"drift_at_least_15pct", drift_ok},
        {"online_at_least_1_15x_frozen", adapt_ok},
        {"online_at_least_0_9x_offline", offline_ok},
        {"rl_step_faster_than_plain", speed_ok}}}};
  write_file_atomic((fs::path(o.out_dir) / "report.json").string(), report.dump(2) + "\n");
  write_file_atomic((fs::path(o.out_dir) / "tau.svg").string(),
                    render_svg(steps, "updraft demo: acceptance length over RL steps (" + models.name + ")"));
  spdlog::info("demo: summary ({} s)", static_cast<int64_t>(sum.seconds));
  for (const std::string& line : summary_table(sum, o.offline_compare))
    spdlog::info("  {}", line);
  spdlog::info("demo: report {}, plot {}", (fs::path(o.out_dir) / "report.json").string(),
               (fs::path(o.out_dir) / "tau.svg").string());
  return 0;
}

}  // namespace
}  // namespace updraft::demo
