// CURVE settings for cross-host record links (docs/messaging.md, "Security").
//
// By default the buffer binds loopback only and refuses to bind anything else unless CURVE
// is configured. With CURVE the server authenticates clients against an allow-list of
// public keys through a ZAP handler (without one, libzmq's CURVE encrypts but admits any
// client). Keys are Z85 text, 40 characters (zmq_curve_keypair).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace updraft::messaging {

struct CurveServer {
  std::string public_key;
  std::string secret_key;
  std::vector<std::string> allowed_clients;  // Z85 public keys
};

struct CurveClient {
  std::string server_public_key;
  std::string public_key;
  std::string secret_key;
};

struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// A fresh key pair (zmq_curve_keypair). Throws updraft::Error if libzmq lacks CURVE.
CurveKeyPair make_curve_keypair();

class ZmqSocket;
// Socket options for either end, set before bind / connect: the server end uses the ZAP
// domain ZapAuthenticator answers for (the allow-list is the authenticator's).
void apply_curve(ZmqSocket& s, const CurveServer& c);
void apply_curve(ZmqSocket& s, const CurveClient& c);

// Answers ZAP requests for one ZeroMQ context: CURVE clients whose key is in the allow-list
// get 200, everything else 400. Runs a thread; must outlive the sockets it guards' binds
// (create it before binding). Counts denials.
class ZapAuthenticator {
 public:
  ZapAuthenticator(void* zmq_context, std::vector<std::string> allowed_z85);
  ~ZapAuthenticator();
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;
  uint64_t denied() const;
  uint64_t allowed() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace updraft::messaging
