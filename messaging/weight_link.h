// The weight link: how new weight versions (kernels/io/weight_version.h) reach rollout workers,
// with or without a shared filesystem (docs/messaging.md, "Weight link").
//
//   WeightPublisher (trainer, RL loop)          WeightSubscriber (each worker)
//     PUB    ── Announcement ──────────────────▶ SUB
//     ROUTER ◀─ VersionRequest / ChunkRequest ── DEALER
//            ── Announcement / WeightChunk ────▶
//
// Publisher. announce(dir, kind, metrics) reads the version's manifest (the directory must be a
// complete published version: manifest valid, every listed file present with its listed size,
// nothing unlisted; each file's sha256 is re-read only with hash_on_announce, since every
// consumer verifies the files in full before use), computes the manifest's sha256 (which pins every file, the
// manifest listing each file's sha256) and the transfer plan (files in name order, manifest
// last, cut into chunk_bytes pieces), makes the version current for its kind and publishes the
// Announcement. It serves chunks of the last keep_versions versions per kind, reading the files
// when asked (they must stay on disk while served; a chunk that cannot be read, or of a version
// no longer kept, is answered "not served": a WeightChunk with count 0). Version requests are
// answered with the current Announcement (version 0: none yet).
//
// Subscriber. Follows the kinds it is given. It asks for the current version at start and every
// poll_interval (so late joiners, reconnects and announcements PUB dropped are all covered: PUB
// never retransmits). For an announcement newer than the version it last delivered:
//   * when the announced path's manifest is readable here and its sha256 matches, and
//     prefer_transfer is off (shared filesystem): delivers that path;
//   * else, when the publisher serves chunks: fetches them (a window of requests in flight, each
//     re-requested after request_timeout, at most max_attempts times), writes the files into
//     <local_root>/<kind>-vNNNNNNNN.tmp, checks the manifest's sha256 against the announcement,
//     fsyncs, renames the directory to its final name and verifies it (verify_version: every
//     listed file's size and sha256, nothing unlisted);
// then calls on_version(kind, version, dir) on the subscriber's thread (keep it short: a
// worker's offer_* loads beside the serving model and returns). Bytes written are bounded by the
// announced size, which is bounded by max_version_bytes. A failure (hash mismatch, bad or
// refused chunk, timeout, unreadable path, on_version throwing) is logged, counted, leaves no
// directory behind, and the version is tried again at an announcement or poll after a backoff
// (1 s, doubling with each failure of that version, at most 5 min; a newer version is taken at
// once). A chunk failing its crc32c is dropped and re-requested after request_timeout. Versions reach on_version in
// increasing order per kind; a newer announcement during a fetch supersedes it. The subscriber
// keeps the two newest fetched versions per kind under local_root and removes older ones; copies
// an earlier process left there count as fetched before any of this one's (so they are pruned
// once two new versions arrive), and its half-written ".tmp" directories are removed at start.
//
// Security as the record link: the publisher binds loopback only unless CURVE is configured
// (both sockets, allow-list through ZAP); message size caps on every socket; every incoming
// frame is decoded as untrusted (messaging/weight_wire.h) and refusals are counted.
// Threads: each side runs one thread; announce() and stats() are thread-safe. Destructors stop
// at once (linger 0); nothing is half-delivered.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "messaging/security.h"
#include "messaging/weight_wire.h"
#include "messaging/zmq_util.h"

namespace updraft::messaging {

struct WeightPublisherOptions {
  std::string pub_endpoint = "tcp://127.0.0.1:5558";
  std::string request_endpoint = "tcp://127.0.0.1:5559";
  void* zmq_context = nullptr;           // inproc:// needs the subscribers' context; null: own one
  size_t chunk_bytes = size_t{4} << 20;  // <= kMaxChunkBytes
  bool serve_chunks = true;
  size_t keep_versions = 2;       // per kind, served as chunks
  bool hash_on_announce = false;  // re-read every file for its sha256 at announce()
  std::optional<CurveServer> curve;
};

struct WeightPublisherStats {
  uint64_t announcements = 0, version_requests = 0, chunk_requests = 0, chunks_served = 0, bytes_served = 0,
           not_served = 0, rejected = 0;
};

class WeightPublisher {
 public:
  // Binds both endpoints (errors throw here).
  explicit WeightPublisher(WeightPublisherOptions options);
  ~WeightPublisher();
  WeightPublisher(const WeightPublisher&) = delete;
  WeightPublisher& operator=(const WeightPublisher&) = delete;

  // Makes the version in dir current for kind and publishes it; returns what was announced.
  // Throws updraft::Error when dir is not a readable published version of kind, or its version
  // is not newer than the current one.
  Announcement announce(const std::string& dir, WeightKind kind,
                        const std::vector<std::pair<std::string, double>>& metrics = {});
  // tcp endpoints as bound (port 0 resolved).
  std::string pub_endpoint() const { return pub_bound_; }
  std::string request_endpoint() const { return req_bound_; }
  WeightPublisherStats stats() const;

 private:
  struct Served;
  void run();
  void serve(const std::string& peer, const uint8_t* header, size_t header_size, const uint8_t* body, size_t size);

  WeightPublisherOptions options_;
  std::unique_ptr<ZmqContext> own_context_;
  void* context_ = nullptr;
  std::unique_ptr<ZapAuthenticator> zap_;
  std::unique_ptr<ZmqSocket> pub_, router_;
  std::string pub_bound_, req_bound_;
  std::unique_ptr<WakeFd> wake_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const Served>> served_;  // newest last, per kind at most keep_versions
  std::vector<EncodedMessage> to_publish_;
  WeightPublisherStats stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct WeightSubscriberOptions {
  std::string pub_endpoint = "tcp://127.0.0.1:5558";
  std::string request_endpoint = "tcp://127.0.0.1:5559";
  void* zmq_context = nullptr;
  std::vector<WeightKind> kinds = {WeightKind::kPolicy, WeightKind::kDrafter};
  std::string local_root;            // where fetched versions go; required when chunks may be fetched
  bool prefer_transfer = false;      // fetch chunks even when the announced path is readable
  uint64_t min_version[2] = {0, 0};  // per kind (index = WeightKind): versions <= this are not delivered
  size_t window = 4;                 // chunk requests in flight
  std::chrono::milliseconds request_timeout{5000};
  int max_attempts = 5;
  std::chrono::milliseconds poll_interval{2000};
  size_t max_chunk_bytes = kMaxChunkBytes;
  uint64_t max_version_bytes = uint64_t{64} << 30;
  std::optional<CurveClient> curve;
  std::function<void(WeightKind, uint64_t version, const std::string& dir)> on_version;
};

struct WeightSubscriberStats {
  uint64_t announcements = 0, delivered = 0, delivered_shared = 0, fetched = 0, fetched_bytes = 0, chunk_retries = 0,
           failures = 0, rejected = 0;
  uint64_t last_delivered[2] = {0, 0};  // per kind
  std::string last_failure;
};

class WeightSubscriber {
 public:
  explicit WeightSubscriber(WeightSubscriberOptions options);
  ~WeightSubscriber();
  WeightSubscriber(const WeightSubscriber&) = delete;
  WeightSubscriber& operator=(const WeightSubscriber&) = delete;

  WeightSubscriberStats stats() const;
  // Waits until version (or a newer one) of kind was delivered; false on timeout.
  bool wait_delivered(WeightKind kind, uint64_t version, std::chrono::milliseconds timeout) const;

 private:
  struct Fetch;
  struct Loop;  // run()'s state and steps (messaging/weight_subscriber.cc)
  void run();

  WeightSubscriberOptions options_;
  std::unique_ptr<ZmqContext> own_context_;
  void* context_ = nullptr;
  mutable std::mutex mu_;
  mutable std::condition_variable delivered_cv_;
  WeightSubscriberStats stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace updraft::messaging
