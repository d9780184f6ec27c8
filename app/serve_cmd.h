// `updraft serve`: a rollout worker as a long-running daemon (design.md §3, §11). It loads a
// policy and its EAGLE-3 drafter (default: the built-in small policy and drafter), serves the
// SGLang-shaped HTTP API (rollout/serve/rollout_service.h), streams the training records of its
// completions to a buffer (--send), and follows the weight link (--weights-pub/--weights-req):
// drafter versions a trainer announces and policy versions an RL loop announces are validated
// beside the serving ones and hot-swapped in, as are versions posted to
// /update_weights_from_disk. Without a drafter (--no-drafter) it decodes plainly until a drafter
// version arrives; with --spec-steps 0 it never speculates. Suffix drafts (--suffix-drafts, default
// both: from the request's siblings and from recent completions, each step deciding by measured
// throughput whether they pay) are grafted onto the drafter's trees, or speculate alone without one. Stops on SIGINT/SIGTERM: running
// requests are finished and answered, those not yet running get 503, records still
// unacknowledged are waited for (up to --drain-seconds).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace updraft {

struct ServeArgs {
  std::string model, drafter;  // empty: the built-in ones (a drafter only with the built-in policy)
  bool no_drafter = false;
  uint64_t policy_version = 0, drafter_version = 0;  // 0: the manifest's when a version dir, else 1
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string port_file;  // written once listening (the port, for --port 0)
  std::string api_key;    // bearer token; also from UPDRAFT_API_KEY
  bool allow_remote = false;
  int max_connections = 64;
  double request_timeout = 20;  // seconds for a request to arrive whole
  // Engine and speculation.
  int64_t kv_cache_mb = 256, max_running = 64;
  int64_t spec_steps = 4, spec_top_k = 1, spec_draft_tokens = 0;
  double spec_stop_below = 0;  // SpecSettings::stop_below
  std::string spec_sampled_drafts = "auto";  // EngineOptions::draft_sampling: auto, on, off
  bool adaptive = true;
  std::string suffix_drafts = "both";  // off, group, history, both (rollout/spec/suffix_drafts.h)
  bool prefix_reuse = true;            // rollout/engine/prefix_reuse.h
  double rollback_margin = 0.2;
  int64_t rollback_rounds = 64;
  double rollback_wait_seconds = 10;  // WorkerOptions::rollback_wait_seconds
  int64_t max_inflight_prompts = 4096;
  // Records.
  std::string send;
  uint32_t worker_id = 1;
  double record_rate = 1.0;
  int64_t record_max_tokens = 0;
  uint64_t send_queue_bytes = uint64_t{256} << 20;  // pending + unacknowledged records held
  std::string curve_key_file, curve_server_file;
  double drain_seconds = 30;
  // Weight link.
  std::string weights_pub, weights_req, weights_dir, weights_curve_server_file;
  bool fetch_weights = false;
};

void add_serve_options(CLI::App& cmd, ServeArgs& a);
int run_serve(const ServeArgs& a);

}  // namespace updraft
