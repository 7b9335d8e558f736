#pragma once
// Who may talk to a parameter-server cluster's ports: ZeroMQ's CURVE security (RFC 26, the
// CurveZMQ handshake: every message encrypted and authenticated) with the cluster's keys, and a
// ZAP handler (RFC 27) on every task that serves, which admits only the cluster's client key.
//
// The keys are made once per cluster (make_cluster_keys, or the `tessel-ps-keys FILE` program)
// and handed to every task as a cluster manager hands out a secret: a file
// (TESSEL_PS_KEYS_FILE=path, readable by its owner only) or the file's text in TESSEL_PS_KEYS.
// The serving tasks (the chief and the ps tasks) hold the server key pair; every task connects
// with the client key pair. CURVE alone would admit any client that knows the server's public
// key; the ZAP handler refuses every client key but the cluster's, so a process without the
// secret keys is refused at the handshake and never reaches a task's request handling.
//
// Without keys the ports are open, as TensorFlow's gRPC servers are: the chief says so once.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "../core/errors.hpp"

namespace tessel::ps {

// A cluster's CURVE keys, each 40 characters of Z85 (ZeroMQ's text form of a 32-byte key).
struct cluster_keys {
  std::string server_public, server_secret, client_public, client_secret;
};

inline constexpr const char* keys_variable = "TESSEL_PS_KEYS";
inline constexpr const char* keys_file_variable = "TESSEL_PS_KEYS_FILE";

// Two fresh key pairs from libzmq's CURVE (libsodium's random numbers).
inline cluster_keys make_cluster_keys() {
  char pub[41], sec[41];
  cluster_keys k;
  if (zmq_curve_keypair(pub, sec) != 0)
    throw runtime_error(
        "cannot make CURVE keys: this libzmq has no CURVE (zmq_has(\"curve\") is 0)");
  k.server_public = pub, k.server_secret = sec;
  if (zmq_curve_keypair(pub, sec) != 0) throw runtime_error("cannot make CURVE keys");
  k.client_public = pub, k.client_secret = sec;
  return k;
}

inline std::string keys_text(const cluster_keys& k) {
  return nlohmann::json{{"server_public", k.server_public},
                        {"server_secret", k.server_secret},
                        {"client_public", k.client_public},
                        {"client_secret", k.client_secret}}
             .dump(2) +
         "\n";
}

// The keys in `text` (a keys file's), checked: each field 40 characters of Z85 that decode to a
// key, and each public key the one of its secret. `where` names the source in errors.
inline cluster_keys parse_cluster_keys(const std::string& text, const std::string& where) {
  const auto fail = [&](const std::string& what) {
    throw value_error(where + ": " + what +
                      "; make the cluster's keys with `tessel-ps-keys FILE` and give every task "
                      "the same file");
  };
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("not the JSON object of a keys file");
  cluster_keys k;
  const auto key = [&](const char* field, std::string& out) {
    if (!j.contains(field) || !j[field].is_string())
      fail("'" + std::string(field) + "' is missing");
    out = j[field].get<std::string>();
    std::uint8_t raw[32];
    if (out.size() != 40 || zmq_z85_decode(raw, out.c_str()) == nullptr)
      fail("'" + std::string(field) + "' is not a key (40 characters of Z85)");
  };
  key("server_public", k.server_public);
  key("server_secret", k.server_secret);
  key("client_public", k.client_public);
  key("client_secret", k.client_secret);
  const auto pairs = [&](const std::string& pub, const std::string& sec, const char* which) {
    char derived[41];
    if (zmq_curve_public(derived, sec.c_str()) != 0 || pub != derived)
      fail(std::string("the ") + which + " public key is not the one of its secret key");
  };
  pairs(k.server_public, k.server_secret, "server");
  pairs(k.client_public, k.client_secret, "client");
  return k;
}

// Writes a new cluster's keys to `path`, readable by its owner only. Refuses a path that exists:
// a cluster's keys are made once, and another file is never overwritten.
inline cluster_keys write_cluster_keys(const std::filesystem::path& path) {
  const cluster_keys k = make_cluster_keys();
  const std::string text = keys_text(k);
  std::FILE* f = nullptr;
  {
    // O_EXCL: the file is new, made with mode 0600 before anything is written to it.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
      throw value_error(
          "cannot write the cluster's keys to " + path.string() + ": " + std::strerror(errno) +
          (errno == EEXIST ? " (keys are never written over a file; give a new path)" : ""));
    f = ::fdopen(fd, "w");
  }
  const bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f == nullptr || std::fclose(f) != 0 || !ok)
    throw value_error("cannot write the cluster's keys to " + path.string());
  return k;
}

// The keys a task was handed in its environment (TESSEL_PS_KEYS_FILE or TESSEL_PS_KEYS), or
// nullopt when neither is set (an open cluster). A keys file others can read is refused, as ssh
// refuses such a private key.
inline std::optional<cluster_keys> cluster_keys_from_environment() {
  const char* file = std::getenv(keys_file_variable);
  const char* text = std::getenv(keys_variable);
  if (file != nullptr && text != nullptr)
    throw value_error(std::string(keys_file_variable) + " and " + keys_variable +
                      " are both set; give the cluster's keys one way");
  if (text != nullptr) return parse_cluster_keys(text, keys_variable);
  if (file == nullptr) return std::nullopt;
  const std::string where = std::string(keys_file_variable) + "=" + file;
  struct stat st {};
  if (::stat(file, &st) != 0)
    throw value_error(where + ": " + std::strerror(errno) +
                      "; give the path of the cluster's keys file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw value_error(
        where + ": the file is open to other users (mode " + mode +
        "), and its secret keys let whoever reads them into the cluster; `chmod 600 " + file + "`");
  }
  std::ifstream in(file);
  const std::string contents((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw value_error(where + ": cannot read the file");
  return parse_cluster_keys(contents, where);
}

// The ZAP handler of one ZeroMQ context (a task that serves): a thread answering the context's
// authentication requests, admitting a CURVE client only with the cluster's client key. Made
// before the serving socket binds; stopped when destroyed.
class zap_handler {
 public:
  zap_handler(zmq::context_t& ctx, const std::string& client_public)
      : socket_(ctx, zmq::socket_type::rep) {
    zmq_z85_decode(client_key_, client_public.c_str());
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("inproc://zeromq.zap.01");
    thread_ = std::thread([this] { run(); });
  }
  zap_handler(const zap_handler&) = delete;
  zap_handler& operator=(const zap_handler&) = delete;
  ~zap_handler() {
    stop_ = true;
    thread_.join();
  }
  // Clients refused so far.
  [[nodiscard]] std::size_t refused() const noexcept { return refused_; }

 private:
  void run() {
    while (!stop_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      // A request: version, request id, domain, address, identity, mechanism, credentials.
      std::vector<zmq::message_t> parts;
      for (;;) {
        zmq::message_t part;
        if (!socket_.recv(part, zmq::recv_flags::none)) break;
        const bool more = part.more();
        parts.push_back(std::move(part));
        if (!more) break;
      }
      if (parts.size() < 6) continue;  // not a request: REP needs a reply, so none is possible
      const bool admit = parts.size() == 7 && parts[5].to_string_view() == "CURVE" &&
                         parts[6].size() == 32 &&
                         std::memcmp(parts[6].data(), client_key_, 32) == 0;
      if (!admit) ++refused_;
      const std::string status = admit ? "200" : "400";
      const std::string text = admit ? "OK" : "not a client of this cluster";
      socket_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
      socket_.send(parts[1], zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(status), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
      socket_.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
      socket_.send(zmq::str_buffer(""), zmq::send_flags::none);
    }
  }
  zmq::socket_t socket_;
  std::uint8_t client_key_[32] = {};
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> refused_{0};
  std::thread thread_;
};

// How a task's sockets are made secure: as a server (the chief's and the ps tasks' ROUTER) or a
// client (every DEALER), with the cluster's keys; nothing without them.
struct transport_security {
  std::optional<cluster_keys> keys;

  [[nodiscard]] bool open() const noexcept { return !keys.has_value(); }
  void serve(zmq::socket_t& s) const {
    if (!keys) return;
    s.set(zmq::sockopt::zap_domain, "tessel-ps");
    s.set(zmq::sockopt::curve_server, 1);
    s.set(zmq::sockopt::curve_secretkey, keys->server_secret);
  }
  void ask(zmq::socket_t& s) const {
    if (!keys) return;
    s.set(zmq::sockopt::curve_serverkey, keys->server_public);
    s.set(zmq::sockopt::curve_publickey, keys->client_public);
    s.set(zmq::sockopt::curve_secretkey, keys->client_secret);
  }
  // The context's ZAP handler, for a task that serves (none for an open cluster).
  [[nodiscard]] std::unique_ptr<zap_handler> handler(zmq::context_t& ctx) const {
    if (!keys) return nullptr;
    return std::make_unique<zap_handler>(ctx, keys->client_public);
  }
};

}  // namespace tessel::ps
