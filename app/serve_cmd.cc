#include "app/serve_cmd.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "app/worker_role.h"
#include "drafter/draft_model.h"
#include "kernels/core/cpu_team.h"
#include "kernels/core/error.h"
#include "kernels/core/stop_signals.h"
#include "kernels/io/weight_version.h"
#include "kernels/ops/gemm.h"
#include "messaging/curve_keys.h"
#include "messaging/metrics.h"
#include "messaging/weight_link.h"
#include "rollout/capture/record_convert.h"
#include "rollout/serve/rollout_service.h"

#ifndef UPDRAFT_SOURCE_DIR
#define UPDRAFT_SOURCE_DIR "."
#endif

namespace updraft {
namespace {

namespace fs = std::filesystem;

// The version a model directory carries: its manifest's (verified in full) when it is a
// published version, else `given` (1 when not given).
uint64_t version_of(const std::string& dir, const char* kind, uint64_t given) {
  if (!fs::exists(fs::path(dir) / "manifest.json"))
    return given == 0 ? 1 : given;
  const WeightVersion v = verify_version(dir, kind);
  UPD_REQUIRE(given == 0 || given == v.version)
      << dir << " is " << kind << " version " << v.version << " by its manifest, not " << given;
  return v.version;
}

std::string subscriber_metrics(const messaging::WeightSubscriber& sub) {
  const messaging::WeightSubscriberStats s = sub.stats();
  std::ostringstream os;
  const std::pair<const char*, uint64_t> rows[] = {{"updraft_weights_announcements_total", s.announcements},
                                                   {"updraft_weights_delivered_total", s.delivered},
                                                   {"updraft_weights_fetched_bytes_total", s.fetched_bytes},
                                                   {"updraft_weights_failures_total", s.failures}};
  for (const auto& [name, v] : rows)
    messaging::prometheus_series(os, name, "counter", "weight link (subscriber)", "", static_cast<double>(v));
  return os.str();
}

}  // namespace

void add_serve_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--model", a.model, "policy: a Hugging Face directory or a published policy version (default: the built-in small policy)");
  cmd.add_option("--drafter", a.drafter, "EAGLE-3 drafter directory or published drafter version (default with the built-in policy: its drafter)");
  cmd.add_flag("--no-drafter", a.no_drafter, "start without a drafter: decode plainly until a drafter version arrives");
  cmd.add_option("--policy-version", a.policy_version, "version the policy carries (default: its manifest's, else 1)");
  cmd.add_option("--drafter-version", a.drafter_version, "version the drafter carries (default: its manifest's, else 1)");
  cmd.add_option("--host", a.host, "HTTP address to bind (loopback unless --allow-remote)")->capture_default_str();
  cmd.add_option("--port", a.port, "HTTP port (0: any free port, see --port-file)")->capture_default_str();
  cmd.add_option("--port-file", a.port_file, "write the bound port here once listening");
  cmd.add_option("--api-key", a.api_key, "require `Authorization: Bearer KEY` (all routes but GET /health and /dashboard)")
      ->envname("UPDRAFT_API_KEY");
  cmd.add_flag("--allow-remote", a.allow_remote, "allow a non-loopback --host (needs --api-key)");
  cmd.add_option("--max-connections", a.max_connections, "HTTP connections served at once")->capture_default_str();
  cmd.add_option("--request-timeout", a.request_timeout,
                 "seconds a request may take to arrive whole (a slower one gets 408 and its connection closes)")
      ->capture_default_str();
  cmd.add_option("--kv-cache-mb", a.kv_cache_mb, "the engine's policy KV cache")->capture_default_str();
  cmd.add_option("--max-running", a.max_running, "sequences decoded at once")->capture_default_str();
  cmd.add_option("--spec-steps", a.spec_steps, "draft depth per speculation round (0: never speculate)")
      ->capture_default_str();
  cmd.add_option("--spec-top-k", a.spec_top_k, "draft branching (1 = chain)")->capture_default_str();
  cmd.add_option("--spec-draft-tokens", a.spec_draft_tokens, "tree size (0 = the depth, a chain)")->capture_default_str();
  cmd.add_option("--spec-stop-below", a.spec_stop_below,
                 "a chain stops drafting once its drafts are jointly less likely than this under the drafter (0: "
                 "never; chains only)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  cmd.add_option("--spec-sampled-drafts", a.spec_sampled_drafts,
                 "a sampling request's chain draws its drafts from the drafter's distribution (on), takes its top "
                 "tokens (off), or whichever measures the higher acceptance (auto)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd.add_flag("!--no-adaptive", a.adaptive,
               "always speculate at the full depth (default: each step picks the depth, plain included, that is "
               "fastest for the live batch)");
  cmd.add_option("--suffix-drafts", a.suffix_drafts,
                 "model-free drafts from sibling rollouts (group), recent completions (history), both or off; each "
                 "step grafts them only where measured to pay")
      ->check(CLI::IsMember({"off", "group", "history", "both"}))
      ->capture_default_str();
  cmd.add_flag("!--no-prefix-reuse", a.prefix_reuse,
               "every request prefills its whole context (default: it takes the longest prefix already cached)");
  cmd.add_option("--rollback-margin", a.rollback_margin, "roll a new drafter back when its tau falls by more than this share")
      ->capture_default_str();
  cmd.add_option("--rollback-rounds", a.rollback_rounds, "speculation rounds watched after a drafter swap")
      ->capture_default_str();
  cmd.add_option("--rollback-wait", a.rollback_wait_seconds,
                 "seconds a rollback confirmation runs beside the engine before the engine waits for it")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--max-inflight-prompts", a.max_inflight_prompts,
                 "prompts in flight beyond which requests get 503 (a larger request gets 413)")
      ->capture_default_str();
  cmd.add_option("--send", a.send, "stream each completion's training record to the buffer at this endpoint");
  cmd.add_option("--worker-id", a.worker_id, "records: the worker id they carry")->capture_default_str();
  cmd.add_option("--record-rate", a.record_rate, "share of completions streamed as records")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--record-max-tokens", a.record_max_tokens, "positions per record (0: no cap, else at least 2)")
      ->capture_default_str();
  cmd.add_option("--send-queue-bytes", a.send_queue_bytes,
                 "records held while the buffer is slow or unreachable (e.g. 64M); beyond it the oldest are shed")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd.add_option("--curve-key", a.curve_key_file, "CURVE: this worker's key file (records and weight link)");
  cmd.add_option("--curve-server", a.curve_server_file, "records over CURVE: the buffer's public key file");
  cmd.add_option("--drain-seconds", a.drain_seconds, "at stop, wait this long for records to be acknowledged")
      ->capture_default_str();
  cmd.add_option("--weights-pub", a.weights_pub, "weight link: the publisher's PUB endpoint (trainer or RL loop)");
  cmd.add_option("--weights-req", a.weights_req, "weight link: the publisher's request endpoint");
  cmd.add_option("--weights-dir", a.weights_dir, "where fetched versions go (default: serve-weights-<worker id>)");
  cmd.add_option("--weights-curve-server", a.weights_curve_server_file, "weight link over CURVE: the publisher's public key file");
  cmd.add_flag("--fetch-weights", a.fetch_weights, "fetch versions as chunks even when the announced path is readable");
}

int run_serve(const ServeArgs& a) {
  StopSignals signals;  // first: a SIGTERM while loading still stops cleanly
  UPD_REQUIRE(a.port >= 0 && a.port <= 65535) << "--port must be in [0, 65535]";
  UPD_REQUIRE(a.weights_pub.empty() == a.weights_req.empty()) << "give both --weights-pub and --weights-req, or neither";
  UPD_REQUIRE(a.send.empty() || a.curve_key_file.empty() || !a.curve_server_file.empty())
      << "records over CURVE need --curve-server (the buffer's public key)";
  UPD_REQUIRE(a.weights_curve_server_file.empty() || !a.curve_key_file.empty())
      << "--weights-curve-server needs --curve-key";
  UPD_REQUIRE(a.send_queue_bytes >= (1u << 20)) << "--send-queue-bytes must be at least 1M";
  UPD_REQUIRE(a.spec_steps >= 0) << "--spec-steps must be >= 0 (0: never speculate)";
  const bool speculate = a.spec_steps > 0;
  const fs::path shipped = fs::path(UPDRAFT_SOURCE_DIR) / "models";
  std::string model = a.model, drafter_dir = a.drafter;
  if (model.empty()) {
    model = (shipped / "small").string();
    UPD_REQUIRE(fs::exists(fs::path(model) / "config.json")) << "no built-in policy at " << model << "; give --model";
    if (drafter_dir.empty() && fs::exists(shipped / "small-eagle3" / "config.json"))
      drafter_dir = (shipped / "small-eagle3").string();
  }
  if (a.no_drafter || !speculate)
    drafter_dir.clear();

  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t pv = version_of(model, "policy", a.policy_version);
  auto policy = std::make_shared<const PolicyModel>(PolicyModel::load(model));
  std::shared_ptr<const DraftModel> draft;
  uint64_t dv = 0;
  if (!drafter_dir.empty()) {
    dv = version_of(drafter_dir, "drafter", a.drafter_version);
    draft = std::make_shared<const DraftModel>(DraftModel::load(drafter_dir, policy->draft_target()));
  }
  std::shared_ptr<const Tokenizer> tok;
  if (fs::exists(fs::path(model) / "tokenizer.json"))
    tok = std::make_shared<const Tokenizer>(Tokenizer::load(model));
  const auto& c = policy->config();
  spdlog::info(
      "serve: policy v{} {} ({} layers, hidden {}, vocab {}), drafter {} in {:.2f} s; cpu bf16 kernel {}, "
      "drafter weights {}",
      pv, model, c.num_layers, c.hidden_size, c.vocab_size,
      draft ? "v" + std::to_string(dv) + " " + drafter_dir : "none (plain)",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
      ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()), draft ? draft_weights_name(draft->weights()) : "none");

  WorkerOptions wo;
  wo.id = a.worker_id;
  wo.engine.kv_cache_bytes = a.kv_cache_mb << 20;
  wo.engine.max_batch = a.max_running;
  wo.speculate = speculate;
  if (speculate)
    wo.engine.spec = SpecSettings{a.spec_steps, a.spec_top_k,
                                  a.spec_draft_tokens > 0 ? a.spec_draft_tokens : a.spec_steps + 1, a.spec_stop_below};
  wo.engine.draft_sampling = parse_draft_sampling(a.spec_sampled_drafts);
  wo.adaptive.enabled = a.adaptive && speculate;
  if (speculate)
    wo.engine.suffix.mode = parse_suffix_mode(a.suffix_drafts);
  wo.engine.prefix_reuse = a.prefix_reuse;
  wo.record_rate = a.record_rate;
  wo.record_max_tokens = a.record_max_tokens;
  wo.rollback_margin = a.rollback_margin;
  wo.rollback_rounds = a.rollback_rounds;
  wo.rollback_wait_seconds = a.rollback_wait_seconds;
  wo.scorer = teacher_forced_scorer();
  std::atomic<RolloutService*> dashboard{nullptr};
  wo.on_window = [&dashboard](const WindowReport& w) {
    if (RolloutService* s = dashboard.load())
      s->record_window(w);
  };
  std::shared_ptr<messaging::RecordSender> sender;
  if (!a.send.empty()) {
    messaging::SenderOptions so;
    so.endpoint = a.send;
    so.worker = a.worker_id;
    so.max_queue_bytes = a.send_queue_bytes;
    so.max_inflight_bytes = std::min(so.max_inflight_bytes, a.send_queue_bytes);
    so.model = record_model(c, wo.engine, draft.get());  // the buffer refuses records inconsistent with it
    if (!a.curve_key_file.empty())
      so.curve = messaging::curve_client_from_files(a.curve_key_file, a.curve_server_file);
    sender = std::make_shared<messaging::RecordSender>(so);
  }
  Worker worker(wo, policy, pv, draft, dv, sender);

  RolloutServiceOptions ro;
  ro.model_name = fs::path(model).filename().string();
  ro.model_path = model;
  ro.max_inflight_prompts = a.max_inflight_prompts;
  ro.chat = load_chat_setup(model);
  std::unique_ptr<messaging::WeightSubscriber> follower;  // set below; the service reads it for /metrics
  if (!a.weights_pub.empty())
    ro.extra_metrics = [&follower] { return follower ? subscriber_metrics(*follower) : std::string(); };
  ro.extra_info = [&a, &wo, &draft] {
    return nlohmann::json{{"speculate", wo.speculate},
                          {"spec_steps", wo.speculate ? wo.engine.spec.steps : 0},
                          {"spec_top_k", wo.engine.spec.top_k},
                          {"spec_draft_tokens", wo.engine.spec.draft_tokens},
                          {"spec_stop_below", wo.engine.spec.stop_below},
                          {"spec_sampled_drafts", draft_sampling_name(wo.engine.draft_sampling)},
                          {"adaptive", wo.adaptive.enabled},
                          {"suffix_drafts", suffix_mode_name(wo.engine.suffix.mode)},
                          {"prefix_reuse", wo.engine.prefix_reuse},
                          {"draft_weights", draft ? draft_weights_name(draft->weights()) : "none"},
                          {"worker_id", a.worker_id},
                          {"send", a.send},
                          {"weights_pub", a.weights_pub}};
  };
  RolloutService service(ro, worker, c, tok, sender);
  dashboard = &service;
  struct StopFollowerFirst {  // on every way out, the subscriber (which calls the service) goes first
    std::unique_ptr<messaging::WeightSubscriber>& f;
    ~StopFollowerFirst() { f.reset(); }
  } stop_follower_first{follower};

  if (!a.weights_pub.empty()) {
    messaging::WeightSubscriberOptions wso;
    wso.pub_endpoint = a.weights_pub;
    wso.request_endpoint = a.weights_req;
    wso.prefer_transfer = a.fetch_weights;
    wso.min_version[static_cast<int>(messaging::WeightKind::kPolicy)] = pv;
    wso.min_version[static_cast<int>(messaging::WeightKind::kDrafter)] = dv;
    wso.local_root = a.weights_dir.empty() ? "serve-weights-" + std::to_string(a.worker_id) : a.weights_dir;
    if (!a.weights_curve_server_file.empty())
      wso.curve = messaging::curve_client_from_files(a.curve_key_file, a.weights_curve_server_file);
    if (!speculate)
      wso.kinds = {messaging::WeightKind::kPolicy};
    follower = follow_weight_link(worker, std::move(wso));
  }

  http::ServerOptions ho;
  ho.host = a.host;
  ho.port = static_cast<uint16_t>(a.port);
  ho.allow_remote = a.allow_remote;
  ho.bearer_token = a.api_key;
  ho.public_paths = {"/health", "/dashboard"};  // the page holds no data; it asks with the key
  ho.max_connections = a.max_connections;
  UPD_REQUIRE(a.request_timeout > 0) << "--request-timeout must be positive";
  ho.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.request_timeout * 1000));
  http::Server server(ho, [&service](const http::Request& r) { return service.handle(r); });
  if (!a.port_file.empty()) {
    const std::string tmp = a.port_file + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << server.port() << "\n";
      UPD_REQUIRE(f.good()) << "cannot write " << tmp;
    }
    fs::rename(tmp, a.port_file);
  }
  spdlog::info("serve: listening on http://{}:{}{}{}", a.host, server.port(), a.api_key.empty() ? "" : " (bearer token)",
               sender ? ", records to " + a.send : "");

  release_cpu_team();  // this thread only waits from here: its CPU team must not slow the worker's
  while (!signals.requested())
    std::this_thread::sleep_for(std::chrono::milliseconds(100));

  spdlog::info("serve: stopping (signal): finishing the running requests");
  follower.reset();
  service.shutdown();
  server.stop();
  dashboard = nullptr;
  const RolloutServiceStats st = service.stats();
  bool drained = true;
  if (sender) {
    drained = sender->flush(std::chrono::milliseconds(static_cast<int64_t>(a.drain_seconds * 1000)));
    const auto& m = sender->metrics();
    spdlog::info("serve: records {} submitted, {} acknowledged, {} shed{}", m.records_submitted.load(),
                 m.records_acked.load(), m.records_shed.load(), drained ? "" : " (not all acknowledged in time)");
  }
  spdlog::info("serve: stopped: {} requests, {} completions, {} tokens in {} engine steps, policy v{}, drafter v{}",
               st.requests, st.completions, st.generated_tokens, worker.metrics().steps, worker.policy_version(),
               worker.drafter_version());
  return drained ? 0 : 1;
}

}  // namespace updraft
