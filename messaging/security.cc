#include "messaging/security.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <set>
#include <thread>

#include "messaging/zmq_util.h"

namespace updraft::messaging {

void apply_curve(ZmqSocket& s, const CurveServer& c) {
  s.set(ZMQ_CURVE_SERVER, 1);
  s.set(ZMQ_CURVE_SECRETKEY, c.secret_key);
  s.set(ZMQ_ZAP_DOMAIN, std::string("updraft"));
}

void apply_curve(ZmqSocket& s, const CurveClient& c) {
  s.set(ZMQ_CURVE_SERVERKEY, c.server_public_key);
  s.set(ZMQ_CURVE_PUBLICKEY, c.public_key);
  s.set(ZMQ_CURVE_SECRETKEY, c.secret_key);
}

CurveKeyPair make_curve_keypair() {
  UPD_REQUIRE(zmq_has("curve")) << "this libzmq was built without CURVE";
  char pub[41], sec[41];
  UPD_ZMQ_CHECK(zmq_curve_keypair(pub, sec));
  return {pub, sec};
}

struct ZapAuthenticator::State {
  std::set<std::string> allowed;  // binary 32-byte keys
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> denied{0}, allowed_count{0};
  std::unique_ptr<ZmqSocket> socket;
  std::thread thread;
};

ZapAuthenticator::ZapAuthenticator(void* zmq_context, std::vector<std::string> allowed_z85)
    : state_(std::make_unique<State>()) {
  for (const auto& k : allowed_z85) {
    UPD_REQUIRE(k.size() == 40) << "CURVE allow-list: key '" << k << "' is not 40 Z85 characters";
    uint8_t bin[32];
    UPD_REQUIRE(zmq_z85_decode(bin, k.c_str()) != nullptr) << "CURVE allow-list: key '" << k << "' is not Z85";
    state_->allowed.emplace(reinterpret_cast<const char*>(bin), 32);
  }
  state_->socket = std::make_unique<ZmqSocket>(zmq_context, ZMQ_REP);
  state_->socket->bind("inproc://zeromq.zap.01");
  State* st = state_.get();
  st->thread = std::thread([st] {
    std::vector<ZmqMessage> req;
    while (!st->stop) {
      zmq_pollitem_t item{st->socket->get(), 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 100) <= 0)
        continue;
      try {
        size_t total = 0;
        if (!recv_multipart(st->socket->get(), req, &total, 16))
          continue;
        auto frame = [&](size_t i) {
          return i < req.size() ? std::string(reinterpret_cast<const char*>(req[i].data()), req[i].size())
                                : std::string();
        };
        // ZAP 1.0 request: version, request id, domain, address, identity, mechanism, credentials.
        const bool ok = frame(0) == "1.0" && frame(5) == "CURVE" && st->allowed.count(frame(6)) != 0;
        (ok ? st->allowed_count : st->denied).fetch_add(1);
        const std::string version = "1.0", id = frame(1), code = ok ? "200" : "400",
                          text = ok ? "OK" : "client key not allowed", user;
        send_copy(st->socket->get(), version.data(), version.size(), true);
        send_copy(st->socket->get(), id.data(), id.size(), true);
        send_copy(st->socket->get(), code.data(), code.size(), true);
        send_copy(st->socket->get(), text.data(), text.size(), true);
        send_copy(st->socket->get(), user.data(), user.size(), true);
        send_copy(st->socket->get(), nullptr, 0, false);
      } catch (const std::exception& e) {
        spdlog::error("ZAP handler: {}", e.what());
      }
    }
  });
}

ZapAuthenticator::~ZapAuthenticator() {
  state_->stop = true;
  state_->thread.join();
}

uint64_t ZapAuthenticator::denied() const {
  return state_->denied.load();
}
uint64_t ZapAuthenticator::allowed() const {
  return state_->allowed_count.load();
}

}  // namespace updraft::messaging
