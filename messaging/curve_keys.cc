#include "messaging/curve_keys.h"

#include <sys/stat.h>
#include <zmq.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/core/error.h"

namespace updraft::messaging {
namespace {

bool valid_z85_key(const std::string& k) {
  if (k.size() != 40)
    return false;
  uint8_t out[32];
  return zmq_z85_decode(out, k.c_str()) != nullptr;
}

// (line number, text) of the lines that are not blank or comments, trimmed.
std::vector<std::pair<int, std::string>> content_lines(const std::string& path) {
  std::ifstream f(path);
  UPD_REQUIRE(f.good()) << "cannot read key file " << path;
  std::vector<std::pair<int, std::string>> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#')
      continue;
    const size_t b = line.find_last_not_of(" \t\r");
    out.emplace_back(n, line.substr(a, b - a + 1));
  }
  return out;
}

// "label <key>" -> key, checked.
std::string labelled_key(const std::string& path, int n, const std::string& text, const std::string& label) {
  std::istringstream in(text);
  std::string l, key, extra;
  in >> l >> key;
  UPD_REQUIRE(l == label && !(in >> extra)) << path << ":" << n << ": expected '" << label << " <40 Z85 characters>'";
  UPD_REQUIRE(valid_z85_key(key)) << path << ":" << n << ": not a 40-character Z85 CURVE key";
  return key;
}

void write_file(const std::string& path, const std::string& text, std::filesystem::perms perms) {
  UPD_REQUIRE(!std::filesystem::exists(path)) << path << " exists; not overwriting a key";
  {
    std::ofstream f(path, std::ios::trunc);
    UPD_REQUIRE(f.good()) << "cannot write " << path;
    // Restrict before writing the secret.
    std::filesystem::permissions(path, perms, std::filesystem::perm_options::replace);
    f << text;
    f.flush();
    UPD_REQUIRE(f.good()) << "cannot write " << path;
  }
}

}  // namespace

CurveKeyPair write_key_files(const std::string& name) {
  const CurveKeyPair kp = make_curve_keypair();
  using P = std::filesystem::perms;
  write_file(name + ".key", "public " + kp.public_key + "\nsecret " + kp.secret_key + "\n", P::owner_read | P::owner_write);
  write_file(name + ".pub", "public " + kp.public_key + "\n",
             P::owner_read | P::owner_write | P::group_read | P::others_read);
  return kp;
}

CurveKeyPair read_key_file(const std::string& path) {
  struct stat st {};
  UPD_REQUIRE(::stat(path.c_str(), &st) == 0) << "cannot read key file " << path;
  UPD_REQUIRE((st.st_mode & (S_IRWXG | S_IRWXO)) == 0)
      << "key file " << path << " is accessible to group or others; chmod 600 it";
  const auto lines = content_lines(path);
  UPD_REQUIRE(lines.size() == 2) << path << ": a key file has two lines, 'public <key>' and 'secret <key>'";
  CurveKeyPair kp;
  kp.public_key = labelled_key(path, lines[0].first, lines[0].second, "public");
  kp.secret_key = labelled_key(path, lines[1].first, lines[1].second, "secret");
  return kp;
}

std::string read_public_key(const std::string& path) {
  const auto lines = content_lines(path);
  UPD_REQUIRE(!lines.empty()) << path << ": no public key";
  return labelled_key(path, lines[0].first, lines[0].second, "public");
}

std::vector<std::string> read_allow_list(const std::string& path) {
  std::vector<std::string> keys;
  for (const auto& [n, text] : content_lines(path)) {
    if (text.rfind("public", 0) == 0) {
      keys.push_back(labelled_key(path, n, text, "public"));
    } else {
      UPD_REQUIRE(valid_z85_key(text)) << path << ":" << n << ": not a 40-character Z85 CURVE key";
      keys.push_back(text);
    }
  }
  UPD_REQUIRE(!keys.empty()) << path << ": the allow-list names no client";
  return keys;
}

CurveServer curve_server_from_files(const std::string& key_file, const std::string& allow_file) {
  const CurveKeyPair kp = read_key_file(key_file);
  return {kp.public_key, kp.secret_key, read_allow_list(allow_file)};
}

CurveClient curve_client_from_files(const std::string& key_file, const std::string& server_public_file) {
  const CurveKeyPair kp = read_key_file(key_file);
  return {read_public_key(server_public_file), kp.public_key, kp.secret_key};
}

}  // namespace updraft::messaging
