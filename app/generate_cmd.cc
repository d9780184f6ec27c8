#include "app/generate_cmd.h"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "messaging/curve_keys.h"
#include "messaging/record_sender.h"
#include "rollout/engine/engine.h"
#include "rollout/tokenizer.h"
#include "rollout/capture/capture.h"
#include "rollout/capture/record_convert.h"

namespace updraft {
namespace {

std::vector<int32_t> parse_ids(const std::string& s, const std::string& what) {
  std::vector<int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    UPD_REQUIRE(used > 0 && used == item.size() && v >= INT32_MIN && v <= INT32_MAX)
        << what << ": \"" << item << "\" is not a token id (expected comma-separated integers)";
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// Streams one record per result and waits for the acknowledgements; false unless all came.
bool send_records(const GenerateArgs& a, const Engine& engine, const std::vector<GenResult>& results) {
  messaging::SenderOptions so;
  so.endpoint = a.send;
  so.worker = a.worker_id;
  so.model = record_model(engine.model().config(), engine.options(), engine.drafter());
  if (!a.curve_key_file.empty())
    so.curve = messaging::curve_client_from_files(a.curve_key_file, a.curve_server_file);
  messaging::RecordSender sender(so);
  uint64_t submitted = 0;
  for (const GenResult& g : results) {
    if (g.tokens.empty() || !g.aux.defined())
      continue;
    messaging::RecordData r = to_record(sample_of(g, a.policy_version));
    r.worker = a.worker_id;
    r.drafter_version = a.drafter_version;
    r.rounds = round_stats(g.rounds);
    submitted += sender.submit(std::move(r)) ? 1 : 0;
  }
  const bool drained = sender.flush(std::chrono::milliseconds(static_cast<int64_t>(a.send_timeout_s * 1000)));
  const auto& m = sender.metrics();
  const uint64_t acked = m.records_acked.load();
  spdlog::info(
      "records: {} submitted to {} as worker {} (policy v{}, drafter v{}), {} acknowledged, {} shed, {} refused",
      submitted, a.send, a.worker_id, a.policy_version, a.drafter_version, acked, m.records_shed.load(),
      m.records_refused.load());
  if (!drained || acked < submitted) {
    spdlog::error("records: {} of {} not acknowledged within {} s (is `updraft buffer` running at {}?)",
                  submitted - std::min(acked, submitted), submitted, a.send_timeout_s, a.send);
    return false;
  }
  return true;
}

}  // namespace

void add_generate_options(CLI::App& cmd, GenerateArgs& a) {
  cmd.add_option("--model", a.model, "Hugging Face model directory (config.json + safetensors)")->required();
  cmd.add_option("--prompt-ids", a.prompt_ids, "comma-separated prompt token ids; repeat for a batch");
  cmd.add_option("--prompt", a.prompts, "prompt text (needs a tokenizer.json); repeat for a batch");
  cmd.add_option("--tokenizer", a.tokenizer, "tokenizer.json for --prompt and output text (default: the model's)");
  cmd.add_option("--max-new-tokens", a.max_new_tokens, "tokens to generate per request")->capture_default_str();
  cmd.add_option("--temperature", a.temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", a.top_k, "0 = off")->capture_default_str();
  cmd.add_option("--top-p", a.top_p, "1 = off")->capture_default_str();
  cmd.add_option("--seed", a.seed, "sampling seed (request i uses seed + i); default: derived from the request id");
  cmd.add_option("--stop-ids", a.stop_ids, "comma-separated stop token ids (in addition to the model's eos)");
  cmd.add_flag("--ignore-eos", a.ignore_eos, "do not stop at the model's eos tokens");
  cmd.add_option("--device", a.device, "cpu or cuda")->capture_default_str();
  cmd.add_option("--kv-cache-mb", a.kv_cache_mb, "KV cache size")->capture_default_str();
  cmd.add_option("--draft", a.draft, "EAGLE-3 drafter directory (EAGLE/SpecForge or speculators format)");
  cmd.add_flag("--draft-fallback", a.draft_fallback, "if the drafter cannot be used, warn and decode plainly");
  cmd.add_option("--spec-steps", a.spec_steps, "draft levels per round")->capture_default_str();
  cmd.add_option("--spec-top-k", a.spec_top_k, "children per expanded node (1 = chain)")->capture_default_str();
  cmd.add_option("--spec-draft-tokens", a.spec_draft_tokens, "tree size including the root")->capture_default_str();
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
  cmd.add_option("--suffix-drafts", a.suffix_drafts,
                 "model-free drafts from the prompts' groups and finished results: off, group, history or both")
      ->check(CLI::IsMember({"off", "group", "history", "both"}))
      ->capture_default_str();
  cmd.add_option("--send", a.send, "stream each result as a training record to the buffer at this endpoint");
  cmd.add_option("--worker-id", a.worker_id, "records: the worker id they carry")->capture_default_str();
  cmd.add_option("--policy-version", a.policy_version, "records: the policy version they carry")->capture_default_str();
  cmd.add_option("--drafter-version", a.drafter_version, "records: the drafter version they carry")
      ->capture_default_str();
  cmd.add_option("--send-timeout", a.send_timeout_s, "records: seconds to wait for the acknowledgements")
      ->capture_default_str();
  cmd.add_option("--curve-key", a.curve_key_file, "records over CURVE: this worker's key file (from `updraft keygen`)");
  cmd.add_option("--curve-server", a.curve_server_file, "records over CURVE: the buffer's public key file");
}

int run_generate(const GenerateArgs& a) {
  UPD_REQUIRE(a.device == "cpu" || a.device == "cuda") << "--device must be cpu or cuda, not " << a.device;
  UPD_REQUIRE(a.kv_cache_mb > 0) << "--kv-cache-mb must be positive";
  UPD_REQUIRE(!a.prompt_ids.empty() || !a.prompts.empty()) << "give at least one --prompt-ids or --prompt";
  UPD_REQUIRE(a.send.empty() || a.send_timeout_s > 0) << "--send-timeout must be positive";
  UPD_REQUIRE(a.curve_key_file.empty() == a.curve_server_file.empty())
      << "give both --curve-key and --curve-server, or neither";
  std::optional<Tokenizer> tok;
  if (!a.prompts.empty() || !a.tokenizer.empty() ||
      std::filesystem::exists(std::filesystem::path(a.model) / "tokenizer.json"))
    tok.emplace(Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer));
  PolicyOptions po;
  po.device = a.device == "cpu" ? Device::CPU : Device::CUDA;
  const auto t0 = std::chrono::steady_clock::now();
  PolicyModel model = PolicyModel::load(a.model, po);
  const auto& c = model.config();
  spdlog::info("loaded {} ({} layers, hidden {}, vocab {}) from {} in {:.2f} s", arch_name(c.arch), c.num_layers,
               c.hidden_size, c.vocab_size, a.model,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EngineOptions eo;
  eo.kv_cache_bytes = a.kv_cache_mb << 20;
  eo.spec = {a.spec_steps, a.spec_top_k, a.spec_draft_tokens, a.spec_stop_below};
  eo.draft_sampling = parse_draft_sampling(a.spec_sampled_drafts);
  eo.suffix.mode = parse_suffix_mode(a.suffix_drafts);
  eo.suffix.gate = false;  // one batch: too few steps to measure whether they pay
  std::unique_ptr<DraftModel> draft;
  std::unique_ptr<Engine> engine_ptr;
  if (!a.draft.empty()) {
    try {
      draft = std::make_unique<DraftModel>(DraftModel::load(a.draft, model.draft_target()));
      engine_ptr = std::make_unique<Engine>(model, eo, draft.get());
      spdlog::info(
          "speculating with the EAGLE-3 drafter {} (draft vocabulary {}, aux layers {}): steps {}, top_k {}, "
          "{} draft tokens{}",
          a.draft, draft->config().draft_vocab_size, fmt::join(draft->aux_layers(), ","), a.spec_steps, a.spec_top_k,
          a.spec_draft_tokens,
          a.spec_stop_below > 0 ? fmt::format(", stopping below a joint draft probability of {}", a.spec_stop_below)
                                : std::string());
    } catch (const Error& e) {
      if (!a.draft_fallback)
        throw;
      spdlog::warn("drafter {} not used, decoding without speculation (--draft-fallback): {}", a.draft, e.what());
      draft.reset();
    }
  }
  if (!engine_ptr)
    engine_ptr = std::make_unique<Engine>(model, eo);
  Engine& engine = *engine_ptr;
  const std::vector<int32_t> stops = a.stop_ids.empty() ? std::vector<int32_t>{} : parse_ids(a.stop_ids, "--stop-ids");
  int failed = 0;
  std::map<uint64_t, size_t> request_of_id;  // engine id -> request index (command-line order, from 0)
  const size_t n_requests = a.prompt_ids.size() + a.prompts.size();
  for (size_t i = 0; i < n_requests; ++i) {
    try {
      GenRequest r;
      r.prompt = i < a.prompt_ids.size() ? parse_ids(a.prompt_ids[i], "--prompt-ids")
                                         : tok->encode(a.prompts[i - a.prompt_ids.size()]);
      r.params.temperature = a.temperature;
      r.params.top_k = a.top_k;
      r.params.top_p = a.top_p;
      r.params.max_new_tokens = a.max_new_tokens;
      r.params.stop_token_ids = stops;
      r.params.ignore_eos = a.ignore_eos;
      r.capture = !a.send.empty();  // aux states + teacher top-k, from the forwards generation runs anyway
      if (a.seed >= 0) {
        r.params.has_seed = true;
        r.params.seed = static_cast<uint64_t>(a.seed) + i;
      }
      request_of_id[engine.submit(std::move(r))] = i;
    } catch (const Error& e) {
      ++failed;
      nlohmann::json j = {{"request", i}, {"error", e.what()}};
      std::printf("%s\n", j.dump().c_str());
    }
  }
  const auto g0 = std::chrono::steady_clock::now();
  const auto results = engine.run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();
  for (const auto& r : results) {
    nlohmann::json j = {{"request", request_of_id.at(r.id)},   {"id", r.id},
                        {"prompt_len", r.prompt.size()},       {"output_ids", r.tokens},
                        {"output_token_logprobs", r.logprobs}, {"finish_reason", r.finish_reason}};
    if (tok)
      j["output_text"] = tok->decode(r.tokens, true);
    if (draft)
      j["spec"] = {{"rounds", r.spec.rounds}, {"accepted", r.spec.accepted}, {"tau", r.spec.tau()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::fflush(stdout);
  const auto& st = engine.stats();
  spdlog::info("{} requests, {} prompt + {} generated tokens in {:.2f} s ({:.1f} generated tokens/s, {} steps)",
               results.size(), st.prompt_tokens, st.generated_tokens, secs, secs > 0 ? st.generated_tokens / secs : 0.0,
               st.steps);
  if (draft) {
    std::string per_pos;
    for (size_t j = 0; j < st.spec.accepted_at.size(); ++j)
      per_pos += fmt::format("{}{:.2f}", j ? " " : "", static_cast<double>(st.spec.accepted_at[j]) / st.spec.rounds);
    spdlog::info("speculation: {} rounds, tau {:.2f}, acceptance per position [{}], draft {:.2f} s, verify {:.2f} s",
                 st.spec.rounds, st.spec.tau(), per_pos, st.spec.draft_seconds, st.spec.verify_seconds);
  }
  if (!a.send.empty() && !send_records(a, engine, results))
    return 1;
  return failed == 0 ? 0 : 1;
}

}  // namespace updraft
