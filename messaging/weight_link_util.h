// Internal to the weight link's sources (messaging/weight_publisher.cc,
// messaging/weight_subscriber.cc, messaging/weight_fetch.cc, messaging/weight_subscriber_loop.h
// and messaging/weight_link_util.cc); nothing else includes it.
// In namespace updraft::messaging::weight_link_detail.
//
// Shared by both sides:
//  * kManifest: the file name of a published version's manifest ("manifest.json"); the publisher
//    hashes it for the announcement and sends it last, the subscriber checks it against the
//    announced sha256.
//  * heartbeats(s): ZMTP heartbeats on a request socket (the publisher's ROUTER, the subscriber's
//    DEALER): a ping every 2 s; a peer that stays silent 30 s is disconnected.
//
// The subscriber's setup before its loop (WeightSubscriber::run), kept here so that
// weight_subscriber.cc and weight_fetch.cc hold the loop and the fetch themselves:
//  * kind_index(k): a WeightKind as the index of the per-kind arrays (min_version, last_delivered).
//  * connect_sockets(sub, dealer, options): the SUB and DEALER sockets' options (reconnect
//    interval, message size caps, DEALER's ZMQ_IMMEDIATE and heartbeats, CURVE when configured),
//    SUB subscribed to everything, both connected to the publisher's endpoints. Throws
//    updraft::Error when a call fails.
//  * adopt_local_copies(options, fetched_dirs): when local_root is set, for each followed kind,
//    appends the versions found under local_root (list_versions: oldest first, not verified) to
//    fetched_dirs[kind_index(kind)] and removes that kind's half-written "<kind>-vNNNNNNNN.tmp"
//    directories (failures to list or remove them are ignored).
#pragma once

#include <cstddef>
#include <filesystem>
#include <vector>

#include "messaging/weight_link.h"
#include "messaging/zmq_util.h"

namespace updraft::messaging::weight_link_detail {

inline constexpr const char* kManifest = "manifest.json";

void heartbeats(ZmqSocket& s);

inline size_t kind_index(WeightKind k) {
  return static_cast<size_t>(k);
}

void connect_sockets(ZmqSocket& sub, ZmqSocket& dealer, const WeightSubscriberOptions& options);

void adopt_local_copies(const WeightSubscriberOptions& options, std::vector<std::filesystem::path> (&fetched_dirs)[2]);

}  // namespace updraft::messaging::weight_link_detail
