#include "rollout/capture/record_convert.h"

#include <cstring>

#include "kernels/core/error.h"
#include "rollout/engine/engine.h"

namespace updraft {
namespace {

messaging::DType wire_dtype(DType d) {
  switch (d) {
    case DType::BF16:
      return messaging::DType::kBF16;
    case DType::F16:
      return messaging::DType::kF16;
    case DType::F32:
      return messaging::DType::kF32;
    default:
      throw Error("to_record: aux dtype must be bf16, f16 or f32");
  }
}

DType tensor_dtype(messaging::DType d) {
  switch (d) {
    case messaging::DType::kBF16:
      return DType::BF16;
    case messaging::DType::kF16:
      return DType::F16;
    case messaging::DType::kF32:
      return DType::F32;
  }
  throw Error("to_sample: unknown aux dtype");
}

}  // namespace

messaging::RecordData to_record(const TttSample& s) {
  messaging::RecordData r;
  r.policy_version = s.policy_version;
  r.prompt_length = static_cast<uint32_t>(s.prompt_length);
  r.tokens = s.tokens;
  const Tensor aux = s.aux.device() == Device::CPU ? s.aux : s.aux.to(Device::CPU);
  UPD_REQUIRE(aux.dim() == 2) << "to_record: aux must be an [n, width] tensor";
  r.aux.dtype = wire_dtype(aux.dtype());
  r.aux.shape = {static_cast<uint32_t>(aux.shape()[0]), static_cast<uint32_t>(aux.shape()[1])};
  r.aux.bytes.resize(aux.nbytes());
  std::memcpy(r.aux.bytes.data(), aux.raw(), aux.nbytes());
  r.teacher_k = static_cast<uint32_t>(s.teacher_k);
  r.teacher_ids = s.teacher_ids;
  r.teacher_logprobs = s.teacher_logprobs;
  r.rejected.assign(s.rejected.begin(), s.rejected.end());
  return r;
}

std::vector<messaging::RoundStats> round_stats(const std::vector<SpecRound>& rounds) {
  std::vector<messaging::RoundStats> out;
  out.reserve(rounds.size());
  for (const SpecRound& x : rounds)
    out.push_back({static_cast<uint32_t>(x.drafted), static_cast<uint32_t>(x.accepted),
                   static_cast<uint32_t>(x.accepted_by[static_cast<size_t>(DraftSource::kGroup)]),
                   static_cast<uint32_t>(x.accepted_by[static_cast<size_t>(DraftSource::kHistory)])});
  return out;
}

TttSample to_sample(const messaging::RecordData& r) {
  TttSample s;
  s.tokens = r.tokens;
  s.prompt_length = r.prompt_length;
  s.policy_version = r.policy_version;
  if (r.aux.shape.size() != 2 || r.aux.shape[0] != r.tokens.size())
    throw Error("to_sample: record aux is not [tokens, width]");
  const DType dt = tensor_dtype(r.aux.dtype);
  s.aux = Tensor::empty({static_cast<int64_t>(r.aux.shape[0]), static_cast<int64_t>(r.aux.shape[1])}, dt);
  if (s.aux.nbytes() != r.aux.bytes.size())
    throw Error("to_sample: record aux byte count does not match its shape");
  std::memcpy(s.aux.raw(), r.aux.bytes.data(), r.aux.bytes.size());
  s.teacher_k = r.teacher_k;
  s.teacher_ids = r.teacher_ids;
  s.teacher_logprobs = r.teacher_logprobs;
  const size_t rows = r.tokens.size() - r.prompt_length;
  if (s.teacher_ids.size() != rows * r.teacher_k || s.teacher_logprobs.size() != rows * r.teacher_k)
    throw Error("to_sample: record teacher arrays do not match its response length");
  s.rejected.assign(r.rejected.begin(), r.rejected.end());
  return s;
}

messaging::RecordModel record_model(const PolicyConfig& cfg, const EngineOptions& opts, const DraftModel* drafter) {
  messaging::RecordModel m;
  m.vocab = static_cast<uint32_t>(cfg.vocab_size);
  m.aux_width = static_cast<uint32_t>(static_cast<int64_t>(Engine::capture_layers(opts, drafter, cfg).size()) *
                                      cfg.hidden_size);
  m.teacher_k = static_cast<uint32_t>(std::min<int64_t>(opts.capture_teacher_k, cfg.vocab_size));
  return m;
}

}  // namespace updraft
