// Fuzz target for everything that decodes untrusted bytes on the record link: the record
// decoder, the control-message decoders and the header parser (anchors.md, fault test 4).
//
// Built two ways (tests/CMakeLists.txt):
//  * with libFuzzer when the compiler supports -fsanitize=fuzzer (clang): the usual
//    LLVMFuzzerTestOneInput entry point; run with -max_total_time=N;
//  * otherwise as a standalone driver (this file's main) that replays corpus files and then
//    mutates seed messages (bit flips, byte writes, pointer-shaped words, truncation,
//    insertion, splicing) for a bounded time, under AddressSanitizer and UBSan.
// Invariants checked beyond "no crash": a message that validates also decodes, and its
// decoded content re-encodes to the same checksum.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/error.h"
#include "messaging/codec.h"
#include "messaging/control.h"
#include "tests/messaging/test_util.h"

using namespace updraft::messaging;

namespace {

uint64_t g_counts[static_cast<size_t>(Reject::kCount)] = {};

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DecodeLimits limits;
  limits.max_message_bytes = 1 << 20;
  const Verdict v = validate_record(data, size, limits);
  g_counts[static_cast<size_t>(v.reason)]++;
  if (v.ok()) {
    RecordData r;
    try {
      r = decode_record(data, size, limits);
    } catch (const updraft::Error&) {
      check(false, "validated record failed to decode");
    }
    check(record_checksum(r) == v.header.checksum, "decoded record's checksum differs");
    check(r.seq == v.header.seq && r.worker == v.header.worker, "header differs from decoded record");
  }
  Reject why;
  (void)decode_hello(data, size, &why);
  (void)decode_hello_reply(data, size, &why);
  (void)decode_ack(data, size, &why);
  (void)parse_header(data, size < 8 ? size : 8);
  return 0;
}

#ifndef UPDRAFT_LIBFUZZER

namespace {

std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  auto add = [&](const EncodedMessage& m) { out.emplace_back(m.data(), m.data() + m.size()); };
  for (uint32_t t : {1u, 4u, 16u, 40u}) {
    RecordData r = testing::make_record(t, t, t, t, 4, t % 3);
    r.seq = t * 11;
    add(encode_record(r));
  }
  add(encode_hello({3, 9}));
  add(encode_hello_reply({5, 7}));
  Ack a;
  a.acked = {1, 2, 3};
  a.rejected = {4};
  a.reject_reason = "bad_checksum";
  add(encode_ack(a));
  return out;
}

void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng, const std::vector<std::vector<uint8_t>>& pool) {
  const int n = 1 + static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    const size_t at = b.empty() ? 0 : rng() % b.size();
    switch (rng() % 8) {
      case 0:
        if (!b.empty())
          b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (!b.empty())
          b[at] = static_cast<uint8_t>(rng());
        break;
      case 2: {  // a pointer-shaped word: small offset, kind bits, sizes
        if (b.size() >= 16) {
          const size_t w = 8 * (rng() % (b.size() / 8));
          uint64_t v = (rng() % 4) | ((rng() % 64) << 2) | ((rng() % 8) << 32) | ((rng() % 4096) << 35);
          if (rng() % 4 == 0)
            v = rng();
          std::memcpy(b.data() + w, &v, 8);
        }
        break;
      }
      case 3:
        b.resize(rng() % (b.size() + 1));
        break;
      case 4: {
        const size_t len = rng() % 64;
        std::vector<uint8_t> ins(len);
        for (auto& x : ins)
          x = static_cast<uint8_t>(rng());
        b.insert(b.begin() + static_cast<long>(std::min(at, b.size())), ins.begin(), ins.end());
        break;
      }
      case 5: {  // the segment table: counts and sizes
        if (b.size() >= 8) {
          const uint32_t vals[] = {0, 1, 2, 511, 0xFFFFFFFFu, static_cast<uint32_t>(b.size() / 8)};
          const uint32_t v = vals[rng() % 6];
          std::memcpy(b.data() + 4 * (rng() % 2), &v, 4);
        }
        break;
      }
      case 6: {  // splice with another seed
        const auto& o = pool[rng() % pool.size()];
        if (!o.empty()) {
          const size_t from = rng() % o.size();
          const size_t len = std::min<size_t>(rng() % 256, o.size() - from);
          b.insert(b.begin() + static_cast<long>(std::min(at, b.size())), o.begin() + static_cast<long>(from),
                   o.begin() + static_cast<long>(from + len));
        }
        break;
      }
      default:
        if (b.size() > 8)
          b.erase(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(std::min(b.size(), at + 8)));
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc)
      seconds = std::atof(argv[++i]);
    else if (a == "--seed" && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else
      corpus.push_back(a);
  }
  auto pool = seeds();
  size_t replayed = 0;
  for (const auto& dir : corpus) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      std::ifstream f(e.path(), std::ios::binary);
      std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(b.data(), b.size());
      pool.push_back(std::move(b));
      ++replayed;
    }
  }
  for (const auto& s : pool)
    LLVMFuzzerTestOneInput(s.data(), s.size());
  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  std::vector<uint8_t> buf;
  while (std::chrono::steady_clock::now() < end) {
    for (int k = 0; k < 256; ++k, ++runs) {
      buf = pool[rng() % pool.size()];
      mutate(buf, rng, pool);
      // Mostly keep whole words and a consistent one-segment table, so that inputs get past
      // the cheap checks into Cap'n Proto.
      if (rng() % 4 != 0) {
        buf.resize(buf.size() / 8 * 8);
        if (buf.size() >= 16 && rng() % 2 == 0) {
          const uint32_t table[2] = {0, static_cast<uint32_t>(buf.size() / 8 - 1)};
          std::memcpy(buf.data(), table, 8);
        }
      }
      // Decode from an odd address now and then: the decoder must copy, not fault.
      if (rng() % 4 == 0) {
        std::vector<uint8_t> shifted(buf.size() + 1);
        std::memcpy(shifted.data() + 1, buf.data(), buf.size());
        LLVMFuzzerTestOneInput(shifted.data() + 1, buf.size());
      } else {
        LLVMFuzzerTestOneInput(buf.data(), buf.size());
      }
    }
  }
  std::printf("fuzz_record_decoder: %llu inputs (%zu replayed from corpus) in %.0f s, seed %llu\n",
              static_cast<unsigned long long>(runs), replayed, seconds, static_cast<unsigned long long>(seed));
  for (size_t i = 0; i < static_cast<size_t>(Reject::kCount); ++i)
    if (g_counts[i] != 0)
      std::printf("  %-18s %llu\n", reject_name(static_cast<Reject>(i)), static_cast<unsigned long long>(g_counts[i]));
  return 0;
}

#endif
