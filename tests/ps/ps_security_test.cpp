// A ps task's port with and without the cluster's CURVE keys (ps/security.hpp), in one process: a
// ps served on a thread, its clients connected through a proxy that records every byte between
// them, as a stranger on the network would see them.
//   open      the control: the variables' values cross the wire as they lie in memory.
//   keyed     the cluster's clients are served; the recorded bytes hold neither the values nor the
//             description's text (encrypted); a process without keys, one with the server's
//             public key but a client key of its own (CURVE admits it, the ZAP handler must not),
//             and one with another cluster's keys get no answer, and their create and NaN push
//             change nothing.
//   keys      the keys file: made with mode 0600, never written over a file, refused when others
//             can read it, when it is damaged, and when it is given twice.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <tessel/ps.hpp>
#include <tessel/tessel.hpp>
#include <thread>
#include <vector>

namespace {
namespace ps = tessel::ps;
using namespace std::chrono_literals;
int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

// A free TCP port of 127.0.0.1 (bound, read, released).
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(s);
  return ntohs(a.sin_port);
}

// A TCP proxy on 127.0.0.1 to `target`'s port, recording every byte it relays either way.
class recording_proxy {
 public:
  explicit recording_proxy(int target) : target_(target) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listener_, 4);
    socklen_t n = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~recording_proxy() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string recorded() {
    std::lock_guard lock(mutex_);
    return bytes_;
  }

 private:
  void run() {
    std::vector<pollfd> fds;
    std::vector<int> peer;  // the other end of each connection, by place in fds
    fds.push_back({listener_, POLLIN, 0});
    peer.push_back(-1);
    while (!stop_) {
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (i == 0) {
          const int client = ::accept(listener_, nullptr, nullptr);
          const int server = ::socket(AF_INET, SOCK_STREAM, 0);
          sockaddr_in a{};
          a.sin_family = AF_INET;
          a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          a.sin_port = htons(static_cast<std::uint16_t>(target_));
          if (client < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            if (client >= 0) ::close(client);
            ::close(server);
            continue;
          }
          fds.push_back({client, POLLIN, 0});
          peer.push_back(server);
          fds.push_back({server, POLLIN, 0});
          peer.push_back(client);
          continue;
        }
        char buffer[65536];
        const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
        if (got <= 0) {  // one end closed: close both
          const int other = peer[i];
          ::close(fds[i].fd);
          ::close(other);
          for (std::size_t j = 1; j < fds.size(); ++j)
            if (fds[j].fd == other || j == i) fds[j].fd = -1, peer[j] = -1;
          continue;
        }
        {
          std::lock_guard lock(mutex_);
          bytes_.append(buffer, static_cast<std::size_t>(got));
        }
        for (ssize_t sent = 0; sent < got;) {
          const ssize_t n = ::write(peer[i], buffer + sent, static_cast<std::size_t>(got - sent));
          if (n <= 0) break;
          sent += n;
        }
      }
      for (std::size_t j = fds.size(); j-- > 1;)
        if (fds[j].fd < 0)
          fds.erase(fds.begin() + static_cast<long>(j)),
              peer.erase(peer.begin() + static_cast<long>(j));
    }
    for (std::size_t j = 1; j < fds.size(); ++j) ::close(fds[j].fd);
  }
  int target_, listener_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::string bytes_;
  std::thread thread_;
};

// Values no message holds by chance, and their bytes.
const std::vector<float> secret_values{1234.5678f,  -8765.4321f, 3.14159265f,
                                       2.71828182f, 1.41421356f, 1.61803398f};
std::string bytes_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

ps::message create_message(std::uint64_t generation, const std::vector<float>& values) {
  ps::message m;
  m.h.what = ps::kind::create;
  m.h.a = generation;
  const nlohmann::json d = {
      {"optimizer",
       ps::optimizer_json(tessel::optimizers::config_of(tessel::optimizers::sgd{0.5, 0.0, false}))},
      {"shards", {{{"path", "secret_variable/shard_0"}, {"shape", {values.size()}}}}}};
  m.frames.push_back(ps::frame_of(d.dump()));
  m.frames.push_back(ps::frame_of(std::span<const float>(values)));
  return m;
}
std::vector<float> pulled(ps::connection& c) {
  ps::message m;
  m.h.what = ps::kind::pull;
  const ps::message r = c.call(std::move(m), 2000ms);
  return r.frames.empty() ? std::vector<float>{} : ps::frame_floats(r.frames[0]).to_vector();
}

// A ps on `port` (a thread) with `security`; the chief's connection through a recording proxy.
struct served_ps {
  int port = free_port();
  ps::cluster_spec cluster;
  std::thread thread;
  int status = -1;
  explicit served_ps(const ps::transport_security& security) {
    cluster.chief = {"127.0.0.1:1"};
    cluster.worker = {"127.0.0.1:2"};
    cluster.ps = {"127.0.0.1:" + std::to_string(port)};
    cluster.task_type = ps::role::ps;
    thread = std::thread([this, security] {
      status = ps::serve_ps(cluster,
                            {.orphan_timeout = 60000ms, .verbose = false, .security = security});
    });
  }
  void stop(zmq::context_t& ctx, const ps::transport_security& security) {
    ps::connection c(ctx, cluster.ps[0], "ps 0", ps::chief_routing_id, security);
    ps::message m;
    m.h.what = ps::kind::shutdown;
    (void)c.try_call(m, 2000ms);
    thread.join();
  }
};

// A stranger's requests (no answer expected): hello, a create wiping the variables, a NaN push.
bool stranger_answered(zmq::context_t& ctx, const std::string& address,
                       const ps::transport_security& security) {
  ps::connection c(ctx, address, "ps 0", "", security);
  ps::message hello;
  hello.h.what = ps::kind::hello;
  bool answered = c.try_call(hello, 700ms).has_value();
  ps::message wipe = create_message(99, {0, 0});
  answered = c.try_call(wipe, 300ms).has_value() || answered;
  ps::message push;
  push.h.what = ps::kind::push;
  push.h.b = 1;
  const std::vector<float> nan(secret_values.size(), std::numeric_limits<float>::quiet_NaN());
  push.frames.push_back(ps::frame_of(std::span<const float>(nan)));
  answered = c.try_call(push, 300ms).has_value() || answered;
  return answered;
}

// A ps served with `security`, the chief's connection to it through a recording proxy, and the
// variables created with the secret values.
struct watched_ps {
  served_ps server;
  recording_proxy proxy;
  ps::connection chief;
  watched_ps(zmq::context_t& ctx, const ps::transport_security& security)
      : server(security),
        proxy(server.port),
        chief(ctx, "127.0.0.1:" + std::to_string(proxy.port()), "ps 0", ps::chief_routing_id,
              security) {
    chief.connect(5000ms);
    (void)chief.call(create_message(1, secret_values), 2000ms);
  }
};

void open_port(zmq::context_t& ctx) {
  const ps::transport_security open;
  watched_ps w(ctx, open);
  auto& [server, proxy, chief] = w;
  check(pulled(chief) == secret_values, "open: the variables are created and pulled");
  const std::string wire = proxy.recorded();
  check(wire.find(bytes_of(secret_values)) != std::string::npos &&
            wire.find("secret_variable") != std::string::npos,
        "open: the values and the description cross the wire readable (" +
            std::to_string(wire.size()) + " bytes recorded)");
  check(stranger_answered(ctx, server.cluster.ps[0], open),
        "open: a stranger is answered (the port is open)");
  server.stop(ctx, open);
}

void keyed_port(zmq::context_t& ctx) {
  const ps::cluster_keys keys = ps::make_cluster_keys();
  const ps::transport_security secure{keys};
  watched_ps w(ctx, secure);
  auto& [server, proxy, chief] = w;
  check(pulled(chief) == secret_values, "keyed: the cluster's client creates and pulls");
  const std::string wire = proxy.recorded();
  check(wire.size() > bytes_of(secret_values).size() &&
            wire.find(bytes_of(secret_values)) == std::string::npos &&
            wire.find(bytes_of({secret_values[0], secret_values[1]})) == std::string::npos &&
            wire.find("secret_variable") == std::string::npos &&
            wire.find("learning_rate") == std::string::npos,
        "keyed: neither the values nor the description's text cross the wire (" +
            std::to_string(wire.size()) + " bytes recorded)");

  const std::string& address = server.cluster.ps[0];
  check(!stranger_answered(ctx, address, ps::transport_security{}),
        "keyed: a process without keys gets no answer");
  ps::cluster_keys own = keys;  // the server's public key, a client key pair of its own
  const ps::cluster_keys other = ps::make_cluster_keys();
  own.client_public = other.client_public;
  own.client_secret = other.client_secret;
  check(!stranger_answered(ctx, address, ps::transport_security{own}),
        "keyed: a process with the server's public key but its own client key gets no answer "
        "(the ZAP handler refuses it)");
  check(!stranger_answered(ctx, address, ps::transport_security{other}),
        "keyed: a process with another cluster's keys gets no answer");
  check(pulled(chief) == secret_values,
        "keyed: the strangers' create and NaN push changed nothing");
  server.stop(ctx, secure);
  check(server.status == 0, "keyed: the ps shut down when the chief said so");
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void keys_file() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessel-ps-keys-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "cluster.keys";
  const ps::cluster_keys k = ps::write_cluster_keys(file);
  struct stat st {};
  ::stat(file.c_str(), &st);
  check((st.st_mode & 0777) == 0600, "keys: written readable by the owner only");
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const ps::cluster_keys back = ps::parse_cluster_keys(text, "f");
  check(back.server_secret == k.server_secret && back.client_public == k.client_public,
        "keys: read back as written");
  std::string why = refusal([&] { (void)ps::write_cluster_keys(file); });
  check(why.find("keys are never written over a file") != std::string::npos &&
            ps::parse_cluster_keys(text, "f").server_public == k.server_public,
        "keys: never written over a file that exists: " + why);

  ::setenv(ps::keys_file_variable, file.c_str(), 1);
  check(ps::cluster_keys_from_environment()->client_secret == k.client_secret,
        "keys: TESSEL_PS_KEYS_FILE gives them");
  ::chmod(file.c_str(), 0644);
  why = refusal([] { (void)ps::cluster_keys_from_environment(); });
  check(why.find("the file is open to other users (mode 0644)") != std::string::npos &&
            why.find("chmod 600") != std::string::npos,
        "keys: a file others can read is refused: " + why);
  ::chmod(file.c_str(), 0600);
  ::setenv(ps::keys_variable, text.c_str(), 1);
  why = refusal([] { (void)ps::cluster_keys_from_environment(); });
  check(why.find("are both set") != std::string::npos, "keys: given twice, refused: " + why);
  ::unsetenv(ps::keys_file_variable);
  check(ps::cluster_keys_from_environment()->server_public == k.server_public,
        "keys: TESSEL_PS_KEYS gives them as text");
  ::unsetenv(ps::keys_variable);
  check(!ps::cluster_keys_from_environment().has_value(), "keys: neither set, an open cluster");

  nlohmann::json j = nlohmann::json::parse(text);
  j["client_public"] = ps::make_cluster_keys().client_public;
  why = refusal([&] { (void)ps::parse_cluster_keys(j.dump(), "f"); });
  check(why.find("the client public key is not the one of its secret key") != std::string::npos,
        "keys: a public key that is not its secret's is refused: " + why);
  j = nlohmann::json::parse(text);
  j["server_secret"] = "short";
  why = refusal([&] { (void)ps::parse_cluster_keys(j.dump(), "f"); });
  check(why.find("'server_secret' is not a key (40 characters of Z85)") != std::string::npos,
        "keys: a key of the wrong length is refused: " + why);
  why = refusal([&] { (void)ps::parse_cluster_keys("not json", "TESSEL_PS_KEYS"); });
  check(why.find("TESSEL_PS_KEYS: not the JSON object of a keys file") != std::string::npos,
        "keys: a damaged file is refused, naming its source: " + why);
  fs::remove_all(dir);
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  zmq::context_t ctx(1);
  open_port(ctx);
  keyed_port(ctx);
  keys_file();
  std::printf("ps_security_test: %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
