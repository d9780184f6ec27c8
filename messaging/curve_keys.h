// CURVE key files, so that commands can turn on encryption and client authentication
// (docs/messaging.md, "Security").
//
//  * A key file (NAME.key, written by `updraft keygen NAME` with mode 0600) holds one key pair:
//        public <40 Z85 characters>
//        secret <40 Z85 characters>
//    Readers refuse a key file that its group or others can read (a secret key must stay secret).
//  * A public key file (NAME.pub) holds the line `public <Z85>`: what peers are given.
//  * An allow-list file names the clients a server admits: one public key per line, bare or as
//    `public <Z85>` (so .pub files can be concatenated); blank lines and `#` comments are skipped.
// Keys are checked (40 characters that decode as Z85 to 32 bytes); errors name the file and line.
#pragma once

#include <string>
#include <vector>

#include "messaging/security.h"

namespace updraft::messaging {

// Writes NAME.key (mode 0600) and NAME.pub for a fresh pair; refuses to overwrite either.
CurveKeyPair write_key_files(const std::string& name);

CurveKeyPair read_key_file(const std::string& path);
// The public key of a key file or a public key file.
std::string read_public_key(const std::string& path);
std::vector<std::string> read_allow_list(const std::string& path);

// A server end: its own key file and the clients it admits.
CurveServer curve_server_from_files(const std::string& key_file, const std::string& allow_file);
// A client end: its own key file and the server's public key (a .pub or .key file).
CurveClient curve_client_from_files(const std::string& key_file, const std::string& server_public_file);

}  // namespace updraft::messaging
