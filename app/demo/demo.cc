#include "app/demo/demo.h"

#include <omp.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include "app/demo/demo_run.h"
#include "app/worker_role.h"
#include "kernels/core/error.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/sampling.h"
#include "rollout/capture/record_convert.h"

namespace updraft::demo {
namespace {

corpus::Mix mix_of(const std::string& name) {
  if (name == "mix")
    return corpus::Mix{};
  if (name != "arith" && name != "code")
    throw Error("demo: --domain takes mix, arith, code or a curriculum A>B of two of them, not '" + name + "'");
  return corpus::Mix::only(corpus::domain_from_name(name));
}

}  // namespace

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

namespace {

void check_options(const DemoOptions& o) {
  if (o.steps < 1 || o.prompts_per_step < 1 || o.group < 2 || o.max_new_tokens < 1 || o.workers < 1 ||
      o.spec_steps < 1 || o.spec_top_k < 1 || o.worker_batch < 0 || o.trainer_steps_per_round < 1 ||
      o.final_prompts < 1 || o.offline_prompts < 2 || o.offline_steps < 1 || o.strong_prompts < 2 ||
      o.strong_steps < 0 || o.trainer_samples < 1 || o.trainer_ttt_steps < 1 || !(o.rl_lr >= 0) ||
      !(o.trainer_lr > 0) || o.window_versions < 1 || !(o.trainer_share >= 0) ||
      !(o.trainer_newest_share >= 0 && o.trainer_newest_share <= 1))
    throw Error(
        "demo: steps, prompts, max-new-tokens, workers, spec settings and trainer steps, samples and TTT "
        "steps must be >= 1, group >= 2 (GRPO compares responses within a group), learning rates positive, "
        "the newest share within [0, 1]");
  if (o.reference != "strong" && o.reference != "quick" && o.reference != "off")
    throw Error("demo: --reference takes strong, quick or off, not '" + o.reference + "'");
  (void)parse_schedule(o);  // throws on a bad --domain
}

}  // namespace

DemoRun::DemoRun(const DemoOptions& o, const std::string& buffer_dir)
    : o_(o),
      models_(resolve_models(o)),
      tok_(Tokenizer::load(models_.policy)),
      schedule_(parse_schedule(o)),
      policy0_(std::make_shared<const PolicyModel>(PolicyModel::load(models_.policy))),
      policy_(policy0_),
      draft0_(std::make_shared<const DraftModel>(DraftModel::load(models_.drafter, policy0_->draft_target()))),
      policy_dir_(models_.policy),
      master_(train::TrainableLlama::load_hf(models_.policy)),
      versions_(fs::path(o.out_dir) / "versions") {
  train::AdamWOptions ao;
  ao.beta2 = 0.99;
  ao.weight_decay = 0.0;
  opt_ = std::make_unique<train::AdamW>(master_.params(), ao);
  const PolicyConfig& pc = policy0_->config();
  spdlog::info(
      "demo: policy {} ({} layers x {}, vocab {}), drafter {} (vocab {}), {} RL steps of {} prompts x {}; cpu bf16 "
      "kernel {}, drafter weights {}, trainer products in {}",
      models_.name, pc.num_layers, pc.hidden_size, pc.vocab_size, models_.drafter, draft0_->config().draft_vocab_size,
      o.steps, o.prompts_per_step, o.group, ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()),
      draft_weights_name(draft0_->weights()), train::ttt_matmul_name(train::parse_ttt_matmul(o.trainer_matmul)));
  // Versions (published policies and drafters) live in the output directory, fresh each run.
  fs::remove_all(versions_);
  fs::create_directories(versions_);

  // The buffer, served over inproc ZeroMQ.
  messaging::StoreOptions so;
  so.path = buffer_dir;
  so.version_window = std::max<uint64_t>(o.window_versions + 1, 4);
  store_ = std::shared_ptr<messaging::RecordStore>(messaging::RecordStore::open(so));
  messaging::BufferServerOptions bo;
  bo.endpoints = {"inproc://updraft-demo-buffer"};
  bo.zmq_context = zctx_.get();
  server_ = std::make_unique<messaging::BufferServer>(bo, store_);

  // Workers: each on its share of the cores.
  const int cores = std::max(1, omp_get_max_threads());
  eo_.spec = SpecSettings{o.spec_steps, o.spec_top_k, o.spec_draft_tokens > 0 ? o.spec_draft_tokens : o.spec_steps + 1,
                          o.spec_stop_below};
  eo_.draft_sampling = parse_draft_sampling(o.spec_sampled_drafts);
  eo_.max_batch = o.worker_batch > 0 ? o.worker_batch : o.prompts_per_step * o.group;
  eo_.suffix.mode = parse_suffix_mode(o.suffix_drafts);  // the workers' serving engines only
  eo_.suffix.max_nodes = o.suffix_nodes;
  eo_.suffix.spec_factor = o.suffix_factor;
  eo_.suffix.validate();
  eo_.prefix_reuse = o.prefix_reuse;
  for (int64_t w = 0; w < o.workers; ++w) {
    messaging::SenderOptions sopt;
    sopt.endpoint = bo.endpoints[0];
    sopt.worker = static_cast<uint32_t>(w + 1);
    sopt.model = record_model(pc, eo_, draft0_.get());  // the buffer refuses records inconsistent with it
    sopt.zmq_context = zctx_.get();
    senders_.push_back(std::make_shared<messaging::RecordSender>(sopt));
    WorkerOptions wo;
    wo.id = static_cast<uint32_t>(w + 1);
    wo.engine = eo_;
    wo.threads = std::max(1, cores / static_cast<int>(o.workers));
    wo.adaptive.enabled = o.adaptive_spec;
    wo.scorer = teacher_forced_scorer();
    wo.record_rate = o.record_rate;
    wo.record_max_tokens = o.record_max_tokens;
    workers_.push_back(std::make_unique<Worker>(wo, policy0_, 1, draft0_, 1, senders_.back()));
    workers_.back()->set_reference_drafter(draft0_, 1);
  }

  // The weight link: versions are announced on it; each worker's subscriber offers them to the
  // worker's hot-swap path (reading the shared directory, or fetching chunks with --fetch-weights).
  messaging::WeightPublisherOptions wpo;
  wpo.zmq_context = zctx_.get();
  wpo.pub_endpoint = "inproc://updraft-demo-weights-pub";
  wpo.request_endpoint = "inproc://updraft-demo-weights-req";
  weights_ = std::make_unique<messaging::WeightPublisher>(wpo);
  for (size_t w = 0; w < workers_.size(); ++w) {
    messaging::WeightSubscriberOptions wso;
    wso.zmq_context = zctx_.get();
    wso.pub_endpoint = weights_->pub_endpoint();
    wso.request_endpoint = weights_->request_endpoint();
    wso.min_version[0] = wso.min_version[1] = 1;  // the initial versions are loaded already
    wso.prefer_transfer = o.fetch_weights;
    wso.local_root = (fs::path(o.out_dir) / ("worker-" + std::to_string(w + 1) + "-weights")).string();
    fs::remove_all(wso.local_root);
    subscribers_.push_back(follow_weight_link(*workers_[w], wso));
  }

  // The online trainer; promoted drafters are announced to every worker.
  to_.dir = versions_.string();
  to_.window_versions = o.window_versions;
  // Records per RL step: one per online completion at record_rate 1 (long ones split further).
  const auto records_per_step = std::max<int64_t>(
      1, static_cast<int64_t>(std::llround(static_cast<double>(o.prompts_per_step * o.group) * o.record_rate)));
  to_.window_records = static_cast<size_t>(records_per_step * static_cast<int64_t>(o.window_versions));
  to_.steps_per_round = o.trainer_steps_per_round;
  to_.idle_rounds = o.trainer_idle_rounds;
  to_.samples_per_step = o.trainer_samples;
  to_.ttt.steps = o.trainer_ttt_steps;
  to_.ttt.rejected_weight = o.trainer_rejected_weight;
  to_.fresh_optimizer_each_round = o.trainer_fresh_optimizer;
  to_.ttt.matmul = train::parse_ttt_matmul(o.trainer_matmul);
  to_.newest_share = o.trainer_newest_share;
  to_.eval_records = static_cast<size_t>(o.trainer_eval_records);
  to_.lr = o.trainer_lr;
  to_.round_decay = train::lr_decay_from_name(o.trainer_lr_decay);
  to_.round_min_lr_ratio = o.trainer_min_lr_ratio;
  to_.min_new_records = static_cast<uint64_t>(std::max<int64_t>(1, records_per_step / 2));
  to_.seed = o.seed;
  to_.progress = [](const std::string& l) { spdlog::info("{}", l); };
  to_.on_promote = [this](const WeightVersion& v) {
    weights_->announce(v.dir, messaging::WeightKind::kDrafter,
                       {{"heldout_tau_estimate", v.meta.value("heldout_tau_estimate", 0.0)}});
    std::lock_guard<std::mutex> lock(promoted_mu_);
    promoted_now_.push_back(v.version);
  };
  trainer_ = std::make_unique<train::OnlineTrainer>(to_, store_, policy0_, 1, *draft0_, 1);
  trainer_->set_paused(true);
  trainer_->start();
  if (is_curriculum(o))
    spdlog::info("demo: curriculum: {} prompts for steps 1-{}, then {} prompts", schedule_.first_name,
                 schedule_.switch_step, schedule_.second_name);
}

// Requests of step `step` (the final comparison uses the last stage): the same for all runs.
std::vector<GenRequest> DemoRun::requests(int64_t step, uint64_t offset, int64_t prompts,
                                          std::vector<corpus::Sample>* samples) const {
  *samples =
      corpus::make_samples(schedule_.at(step), corpus::Split::kRl, static_cast<size_t>(prompts), o_.seed, offset);
  std::vector<GenRequest> reqs;
  for (size_t i = 0; i < samples->size(); ++i)
    for (int64_t g = 0; g < o_.group; ++g) {
      GenRequest r;
      r.prompt = tok_.encode((*samples)[i].prompt);
      r.params.temperature = 1.0f;
      r.params.max_new_tokens = o_.max_new_tokens;
      r.params.has_seed = true;
      r.params.seed = ops::mix64(o_.seed ^ ops::mix64(offset * 1000003 + i * 131 + static_cast<uint64_t>(g)));
      reqs.push_back(std::move(r));
    }
  return reqs;
}

int DemoRun::run() {
  std::vector<StepRecord> steps;
  for (int64_t s = 0; s < o_.steps; ++s)
    steps.push_back(rl_step(s));
  trainer_->stop();
  close_weight_link();
  Summary sum = summarize(steps, is_curriculum(o_) ? static_cast<size_t>(schedule_.switch_step) : 0);
  for (const train::RoundReport& r : trainer_->reports())
    sum.promotions += r.promoted ? 1 : 0;
  final_compare(sum);
  for (auto& w : workers_) {
    const WorkerMetrics m = w->metrics();
    sum.drafter_swaps += m.drafter_swaps;
    sum.policy_swaps += m.policy_swaps;
    sum.rejected += m.rejected_drafter + m.rejected_policy;
    sum.rollbacks += m.rollbacks;
    sum.completions_unrecorded += m.records.unrecorded;
    sum.record_chunks += m.records.chunks;
    sum.online_prefill_tokens += m.prefill_tokens;
    sum.online_cached_prompt_tokens += m.cached_prompt_tokens;
  }
  sum.records_stored = static_cast<int64_t>(server_->metrics().records_stored.load());
  sum.seconds = since(t_start_);
  write_outputs(steps, sum);
  return 0;
}
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
  return DemoRun(o, buffer_dir).run();
}

}  // namespace updraft::demo
