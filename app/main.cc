// updraft: one binary, one subcommand per role or tool (design.md §3).
// Subcommands are registered here as the features behind them land; errors from any of them
// are caught at this boundary, printed, and turned into exit code 1 (2 for usage errors).
#include <omp.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "app/cli_yaml.h"
#include "app/config.h"
#include "app/demo_cmd.h"
#include "app/generate_cmd.h"
#include "app/logging.h"
#include "app/serve_cmd.h"
#include "app/train_cmd.h"
#include "drafter/draft_model.h"
#include "kernels/core/device.h"
#include "kernels/core/error.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/gemv_cpu.h"
#include "messaging/buffer_main.h"
#include "messaging/curve_keys.h"

#ifndef UPDRAFT_VERSION
#define UPDRAFT_VERSION "0.0.0"
#endif

namespace {

int run_info() {
  std::printf("updraft %s\n", UPDRAFT_VERSION);
  std::printf("  CPU threads        : %d\n", omp_get_max_threads());
  std::printf("  CPU AVX-512 kernels: %s\n", updraft::ops::cpu::cpu_has_avx512() ? "yes" : "no");
  std::string kernels;
  for (auto k :
       {updraft::ops::CpuBf16Kernel::kFma, updraft::ops::CpuBf16Kernel::kDot, updraft::ops::CpuBf16Kernel::kAmx,
        updraft::ops::CpuBf16Kernel::kAvx2, updraft::ops::CpuBf16Kernel::kPortable})
    if (updraft::ops::cpu_bf16_kernel_available(k))
      kernels += std::string(kernels.empty() ? "" : ", ") + updraft::ops::cpu_bf16_kernel_name(k);
  std::printf("  CPU bf16 kernels   : %s (in use: %s)\n", kernels.c_str(),
              updraft::ops::cpu_bf16_kernel_name(updraft::ops::cpu_bf16_kernel()));
  const std::string int8 = updraft::ops::cpu_int8_kernel_name();
  std::printf("  CPU int8 kernel    : %s (a CPU drafter's weights: %s)\n",
              int8 == "none" ? "none (--draft-weights int8 unavailable)" : int8.c_str(),
              updraft::draft_weights_name(updraft::resolved_draft_weights(updraft::Device::CPU)));
  std::printf("  CUDA backend built : %s\n", updraft::cuda_compiled() ? "yes" : "no");
  std::printf("  CUDA device usable : %s\n", updraft::cuda_available() ? "yes" : "no");
  return 0;
}

int run_config_check(const std::string& path) {
  updraft::Config cfg = updraft::Config::load_file(path);
  std::printf("%s: valid YAML mapping\n", cfg.source().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"updraft: RL rollouts with EAGLE-3 speculative decoding and an online drafter"};
  app.set_version_flag("--version", std::string("updraft ") + UPDRAFT_VERSION);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off")->capture_default_str();
  std::string cpu_kernel = "auto";
  app.add_option("--cpu-kernel", cpu_kernel,
                 "CPU kernel for bf16 matmuls: auto (amx where the CPU has it, else dot with AVX512-BF16, else fma "
                 "with AVX-512, else avx2 with AVX2 and FMA), fma, dot, amx (AMX tiles), avx2, portable; see "
                 "docs/benchmarks.md")
      ->check(CLI::IsMember({"auto", "fma", "dot", "amx", "avx2", "portable"}))
      ->capture_default_str();
  std::string draft_weights = "auto";
  app.add_option(
         "--draft-weights", draft_weights,
         "drafter serving weights: auto (int8 where the CPU has AMX-INT8 or AVX512-VNNI, else bf16), bf16 (as stored) "
         "or int8 (quantized per row: half the bytes per draft step; CPU only; see docs/benchmarks.md)")
      ->check(CLI::IsMember({"auto", "bf16", "int8"}))
      ->capture_default_str();
  app.require_subcommand(1);
  app.set_config("--config", "",
                 "YAML file of option values, one section per command (configs/ has examples); "
                 "command-line options win")
      ->envname("UPDRAFT_CONFIG");
  app.config_formatter(std::make_shared<updraft::YamlCliConfig>());
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error, not ignored

  auto* info = app.add_subcommand("info", "Show the build and the compute backends available on this machine");

  auto* config = app.add_subcommand("config", "Configuration tools");
  config->require_subcommand(1);
  std::string config_path;
  auto* config_check = config->add_subcommand("check", "Parse a YAML config file and report the first error");
  config_check->add_option("file", config_path, "config file")->required();

  auto* generate =
      app.add_subcommand("generate", "Generate from prompt token ids with a Hugging Face model (plain decoding)");
  updraft::GenerateArgs gen_args;
  updraft::add_generate_options(*generate, gen_args);

  auto* demo = app.add_subcommand(
      "demo", "The whole mission on the built-in policy: RL with speculative rollouts and an online drafter");
  updraft::demo::DemoOptions demo_opts;
  updraft::add_demo_options(*demo, demo_opts);

  auto* serve = app.add_subcommand(
      "serve", "A rollout worker daemon: SGLang-shaped HTTP API, records to a buffer, hot-swapped weight versions");
  updraft::ServeArgs serve_args;
  updraft::add_serve_options(*serve, serve_args);

  auto* pretrain = app.add_subcommand("pretrain", "Train the built-in policy and its tokenizer on the built-in corpus");
  updraft::train::PretrainOptions pre;
  updraft::add_pretrain_options(*pretrain, pre);

  auto* train_cmd = app.add_subcommand(
      "train", "Train an EAGLE-3 drafter: online beside a running buffer, or --once offline (in-domain)");
  updraft::TrainArgs train_args;
  updraft::add_train_options(*train_cmd, train_args);

  auto* buffer = app.add_subcommand("buffer", "Receive records from workers over ZeroMQ and keep them in RocksDB");
  updraft::messaging::BufferCommandOptions buf;
  buffer->add_option("--endpoint", buf.endpoint, "ZeroMQ endpoint to bind (loopback only without CURVE)")
      ->capture_default_str();
  buffer->add_option("--path", buf.path, "RocksDB directory")->capture_default_str();
  buffer->add_option("--max-bytes", buf.max_bytes, "retention: record bytes kept (e.g. 16G; 0: no cap)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  buffer->add_option("--version-window", buf.version_window, "retention: policy versions kept (0: all)")
      ->capture_default_str();
  buffer->add_option("--sync", buf.sync, "fsync: acks survive power loss; os: acks survive process crashes")
      ->check(CLI::IsMember({"fsync", "os"}))
      ->capture_default_str();
  buffer->add_option("--max-message-bytes", buf.max_message_bytes, "largest record accepted")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  buffer->add_option("--report-seconds", buf.report_seconds, "log counters this often (0: never)")
      ->capture_default_str();
  buffer->add_option("--metrics-file", buf.metrics_file, "rewrite Prometheus text metrics here at each report");
  buffer->add_option("--curve-key", buf.curve_key_file, "CURVE: this buffer's key file (from `updraft keygen`)");
  buffer->add_option("--curve-allow", buf.curve_allow_file, "CURVE: the workers' public keys admitted, one per line");

  auto* keygen = app.add_subcommand("keygen", "Write a CURVE key pair: NAME.key (secret, mode 600) and NAME.pub");
  std::string keygen_name;
  keygen->add_option("name", keygen_name, "path prefix of the two files")->required();

  auto* inspect = app.add_subcommand("inspect", "Inspection tools");
  inspect->require_subcommand(1);
  auto* inspect_buffer =
      inspect->add_subcommand("buffer", "Counts, bytes, versions and one decoded record of a buffer (read-only)");
  updraft::messaging::InspectBufferOptions insp;
  inspect_buffer->add_option("path", insp.path, "RocksDB directory of the buffer")->required();
  inspect_buffer->add_option("--key", insp.key, "record to decode, policy_version/worker/seq (default: newest)");
  inspect_buffer->add_flag("--values", insp.dump_values, "also print the first token ids");
  inspect_buffer->add_option("--quarantine", insp.quarantine,
                             "list a quarantine log (the online trainer's <dir>/quarantine.tsv) against the buffer");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 words an unknown key as "INI was not able to parse <section.key>".
    std::string what = e.what();
    const std::string tag = "INI was not able to parse ";
    if (what.rfind(tag, 0) == 0)
      what = "config: no option named '" + what.substr(tag.size()) + "' (see `updraft <command> --help`)";
    std::fprintf(stderr, "%s\n", what.c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    updraft::setup_logging(log_level);
    updraft::ops::CpuBf16Kernel kernel = updraft::ops::parse_cpu_bf16_kernel(cpu_kernel);
    // auto: AMX tiles where the CPU has them, for every command (gemm.h; docs/benchmarks.md,
    // "Verification at the roofline").
    if (!updraft::ops::cpu_bf16_kernel_available(kernel))
      throw updraft::Error("--cpu-kernel " + cpu_kernel +
                           ": this CPU does not have it (`updraft info` lists what it has)");
    updraft::ops::set_cpu_bf16_kernel(kernel);
    updraft::set_draft_weights(updraft::parse_draft_weights(draft_weights));
    if (info->parsed())
      return run_info();
    if (config_check->parsed())
      return run_config_check(config_path);
    if (generate->parsed())
      return updraft::run_generate(gen_args);
    if (demo->parsed())
      return updraft::run_demo_cmd(demo_opts);
    if (serve->parsed())
      return updraft::run_serve(serve_args);
    if (pretrain->parsed())
      return updraft::run_pretrain(pre);
    if (train_cmd->parsed())
      return updraft::run_train(train_args);
    if (buffer->parsed())
      return updraft::messaging::run_buffer(buf);
    if (inspect_buffer->parsed())
      return updraft::messaging::run_inspect_buffer(insp);
    if (keygen->parsed()) {
      const auto kp = updraft::messaging::write_key_files(keygen_name);
      std::printf("wrote %s.key (keep it secret) and %s.pub (public %s)\n", keygen_name.c_str(), keygen_name.c_str(),
                  kp.public_key.c_str());
      return 0;
    }
  } catch (const updraft::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const updraft::CheckFailure& e) {
    spdlog::critical("internal error: {}", e.what());
    return 1;
  }
  return 0;
}
