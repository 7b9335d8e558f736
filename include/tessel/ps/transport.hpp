#pragma once
// The messages of a parameter-server job, over ZeroMQ (libzmq + cppzmq, from Debian).
//
// Why ZeroMQ: the tasks must outlive each other (one MPI job ends when any process dies), a
// worker may be started again and reconnect, and the messages are few kinds of tensors with a
// small header, not an interface to describe: ZeroMQ's sockets reconnect by themselves, frame
// multipart messages, and send a buffer without copying it. gRPC (TensorFlow's choice) would add
// protobuf schemas, code generation and a copy into a protobuf for every tensor.
//
// A message is a multipart ZeroMQ message: one `header` frame (a fixed 48-byte struct), then
// one frame per tensor, its float32 values as they lie in memory (both ends are this library on
// the same kind of machine: little-endian IEEE floats). A sent tensor frame points at the
// sender's buffer, kept alive until ZeroMQ has written it (no copy); a received one is copied out
// of ZeroMQ's buffer once, after messages.hpp has checked it. Every task that serves binds a ROUTER
// socket on its address's port; a task that asks connects a DEALER socket, and matches replies to
// requests by id.
#include <zmq.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../core/errors.hpp"
#include "security.hpp"

namespace tessel::ps {

// A task that stopped answering (its address and the time waited in the message).
class task_lost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A ps task that stopped answering, with its index.
class ps_lost : public task_lost {
 public:
  ps_lost(std::size_t index, const std::string& what) : task_lost(what), ps(index) {}
  std::size_t ps;
};

enum class kind : std::uint32_t {
  hello = 1,  // -> any: are you there? (reply: hello)
  create,     // chief -> ps: a JSON frame (optimizer, shard shapes), then the shards' values
  pull,       // worker or chief -> ps: the values of every shard it holds (reply: the frames)
  push,       // worker -> ps: a gradient frame per shard; a = batch, b = generation, c = version
  state,      // chief -> ps: the shards' values and the optimizer's state (reply: JSON + frames)
  restore,    // chief -> ps: state's reply given back
  shutdown,   // chief -> ps or worker: stop
  ready,      // worker -> chief: a = worker index, b = the dataset's fingerprint
  run,        // chief -> worker: a = function id, b = epoch, c = step, d = global element index
  done,  // worker -> chief: a run's result: a = function id, b = epoch, c = step; frame: [loss,
         // staleness]
  heartbeat,  // worker -> chief (a = worker index), chief -> ps; reply: heartbeat
  failed,     // reply: the request failed; a text frame says why
  empty,      // reply from a ps holding no variables: it started (again) since they were created
};

struct header {
  std::uint32_t magic = 0x7e55e1a5;
  kind what = kind::hello;
  std::uint64_t id = 0;  // the request's id; a reply carries it back
  std::uint64_t a = 0, b = 0, c = 0, d = 0;
};
static_assert(sizeof(header) == 48);

struct message {
  header h;
  std::vector<zmq::message_t> frames;  // the tensors (or a JSON or text frame)
};

// A frame that sends `count` values of `values` from `offset` without copying them: the buffer
// lives until ZeroMQ is done with it.
inline zmq::message_t frame_of(std::shared_ptr<const std::vector<float>> values, std::size_t offset,
                               std::size_t count) {
  auto* keep = new std::shared_ptr<const std::vector<float>>(std::move(values));
  return zmq::message_t(
      const_cast<float*>((*keep)->data() + offset), count * sizeof(float),
      [](void*, void* hint) {
        delete static_cast<std::shared_ptr<const std::vector<float>>*>(hint);
      },
      keep);
}
inline zmq::message_t frame_of(std::shared_ptr<const std::vector<float>> values) {
  const std::size_t n = values->size();
  return frame_of(std::move(values), 0, n);
}
inline zmq::message_t frame_of(std::span<const float> values) {
  return zmq::message_t(values.data(), values.size_bytes());
}
inline zmq::message_t frame_of(const std::string& text) {
  return zmq::message_t(text.data(), text.size());
}
// A received frame's float32 values. ZeroMQ hands a frame out at any address (a small one lies
// inside the message object, a large one inside its receive buffer, at an odd address as often
// as not), so the values are copied out with memcpy, never read in place as floats.
class frame_floats {
 public:
  explicit frame_floats(const zmq::message_t& m) noexcept
      : bytes_(static_cast<const unsigned char*>(m.data())), size_(m.size()) {}
  // Whether the frame holds a whole number of floats.
  [[nodiscard]] bool whole() const noexcept { return size_ % sizeof(float) == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_ / sizeof(float); }
  [[nodiscard]] float operator[](std::size_t i) const noexcept {
    float f;
    std::memcpy(&f, bytes_ + i * sizeof(float), sizeof f);
    return f;
  }
  // The values into `out`, which holds exactly size() of them.
  void copy_to(std::span<float> out) const noexcept {
    if (!out.empty()) std::memcpy(out.data(), bytes_, out.size_bytes());
  }
  [[nodiscard]] std::vector<float> to_vector() const {
    std::vector<float> out(size());
    copy_to(out);
    return out;
  }
  // The index of the first value that is NaN or infinite (all exponent bits set), if any. Runs
  // of values are tested without a branch per value, so that the loop vectorizes.
  [[nodiscard]] std::optional<std::size_t> first_non_finite() const noexcept {
    constexpr std::size_t run = 256;
    const std::size_t n = size();
    for (std::size_t start = 0; start < n; start += run) {
      const std::size_t end = std::min(n, start + run);
      bool bad = false;
      for (std::size_t i = start; i < end; ++i) bad |= !finite_at(i);
      if (bad)
        for (std::size_t i = start; i < end; ++i)
          if (!finite_at(i)) return i;
    }
    return std::nullopt;
  }

 private:
  [[nodiscard]] bool finite_at(std::size_t i) const noexcept {
    std::uint32_t bits;
    std::memcpy(&bits, bytes_ + i * sizeof bits, sizeof bits);
    return (bits & 0x7f800000u) != 0x7f800000u;
  }
  const unsigned char* bytes_;
  std::size_t size_;
};
inline std::string text_of(const zmq::message_t& m) { return m.to_string(); }

// Sends m (after `identity`, the peer's, on a ROUTER socket). The frames are moved out.
inline void send(zmq::socket_t& s, message& m, const zmq::message_t* identity = nullptr) {
  if (identity != nullptr) {
    s.send(zmq::const_buffer(identity->data(), identity->size()), zmq::send_flags::sndmore);
  }
  const bool more = !m.frames.empty();
  s.send(zmq::const_buffer(&m.h, sizeof m.h),
         more ? zmq::send_flags::sndmore : zmq::send_flags::none);
  for (std::size_t i = 0; i < m.frames.size(); ++i)
    s.send(m.frames[i], i + 1 < m.frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  m.frames.clear();
}

// Receives one message when one arrives within `timeout` (a ROUTER socket's first frame goes to
// `identity`). A message that is not this protocol's (wrong size or magic) is dropped.
inline std::optional<message> receive(zmq::socket_t& s, std::chrono::milliseconds timeout,
                                      zmq::message_t* identity = nullptr) {
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  std::vector<zmq::message_t> parts;
  for (;;) {
    zmq::message_t part;
    if (!s.recv(part, zmq::recv_flags::none)) return std::nullopt;
    const bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) break;
  }
  std::size_t first = 0;
  if (identity != nullptr) {
    if (parts.empty()) return std::nullopt;
    identity->move(parts[0]);
    first = 1;
  }
  if (parts.size() <= first || parts[first].size() != sizeof(header)) return std::nullopt;
  message m;
  std::memcpy(&m.h, parts[first].data(), sizeof(header));
  if (m.h.magic != header{}.magic) return std::nullopt;
  for (std::size_t i = first + 1; i < parts.size(); ++i) m.frames.push_back(std::move(parts[i]));
  return m;
}

// "tcp://host:port" for an address "host:port" ("[::1]:2222" as it is); to bind, every interface
// on that port, IPv4 and IPv6 (TensorFlow's servers listen on every interface too).
inline std::string connect_endpoint(const std::string& address) { return "tcp://" + address; }
inline std::string bind_endpoint(const std::string& address) {
  return "tcp://*:" + address.substr(address.rfind(':') + 1);
}

// Every socket: no lingering on close, and IPv6 as well as IPv4 (an address "[::1]:2222" is
// reached, and a bound socket takes both).
inline void quiet(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::ipv6, 1);
}

// Binds `s` to the port of `address`, the task `who` ("ps 1"); a port that cannot be taken is a
// value_error naming the task, the address and what to do.
inline void listen(zmq::socket_t& s, const std::string& who, const std::string& address) {
  try {
    s.bind(bind_endpoint(address));
  } catch (const zmq::error_t& e) {
    const std::string port = address.substr(address.rfind(':') + 1);
    std::string why = who + " cannot listen on " + address + " (port " + port +
                      " of every interface of this machine): " + e.what();
    if (e.num() == EADDRINUSE)
      why += "; another process listens there (`ss -ltnp 'sport = :" + port +
             "'` names it), or another task of this cluster was given the same port. Give " + who +
             " a free port in TF_CONFIG";
    else if (e.num() == EACCES)
      why += "; ports below 1024 need privileges. Give " + who + " a port from 1024 in TF_CONFIG";
    throw value_error(why);
  }
}

// A reply as connection::call returns it from `who` ("ps 1 at host:port"): `failed` throws
// value_error with its text, `empty` throws task_lost (the ps started again and holds no
// variables: a request sent to the task that stopped, delivered to the one that took its place).
inline message checked(message r, const std::string& who) {
  if (r.h.what == kind::failed)
    throw value_error(who + ": " +
                      (r.frames.empty() ? std::string("failed") : text_of(r.frames[0])));
  if (r.h.what == kind::empty)
    throw task_lost(who + " holds no variables: it started again since the chief created them");
  return r;
}

// A DEALER socket to one task, asking and waiting for replies.
class connection {
 public:
  // `name` says who the task is in messages ("ps 0"); `routing_id`, when given, is how this
  // end is known to the task (the chief's is "chief").
  connection(zmq::context_t& ctx, std::string address, std::string name,
             const std::string& routing_id = {}, const transport_security& security = {})
      : socket_(ctx, zmq::socket_type::dealer),
        address_(std::move(address)),
        name_(std::move(name)) {
    quiet(socket_);
    security.ask(socket_);
    if (!routing_id.empty()) socket_.set(zmq::sockopt::routing_id, zmq::buffer(routing_id));
    socket_.set(zmq::sockopt::reconnect_ivl, 100);
    socket_.set(zmq::sockopt::reconnect_ivl_max, 1000);
    socket_.connect(connect_endpoint(address_));
  }

  // Says hello until the task answers: again after 50 ms, then twice as long each time up to 1 s,
  // for at most `limit`; then task_lost naming the task, its address and the time waited.
  void connect(std::chrono::milliseconds limit) {
    const auto start = std::chrono::steady_clock::now();
    std::chrono::milliseconds wait{50};
    for (;;) {
      message m;
      m.h.what = kind::hello;
      if (try_call(m, wait)) return;
      if (std::chrono::steady_clock::now() - start >= limit)
        throw task_lost("could not reach " + name_ + " at " + address_ + " within " +
                        seconds(limit) +
                        ": no answer to hello; check that it runs, that "
                        "TF_CONFIG gives its address, and that every task has the cluster's "
                        "keys or none has");
      wait = std::min(wait * 2, std::chrono::milliseconds{1000});
    }
  }

  // Sends m and returns the reply with its id; task_lost when none comes within `timeout`. A
  // `failed` reply throws value_error with its text; an `empty` one task_lost (a ps started again
  // has lost its variables, as one that stopped answering has).
  message call(message m, std::chrono::milliseconds timeout) {
    std::optional<message> r = try_call(m, timeout);
    if (!r)
      throw task_lost(name_ + " at " + address_ + " did not answer within " + seconds(timeout));
    return checked(std::move(*r), name_ + " at " + address_);
  }
  // Sends m and waits for its reply up to `timeout` (replies to earlier requests are dropped).
  std::optional<message> try_call(message& m, std::chrono::milliseconds timeout) {
    m.h.id = ++last_id_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!send_within(m, timeout)) return std::nullopt;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      std::optional<message> r = heard(receive(socket_, left));
      if (r && r->h.id == last_id_) return r;
    }
  }
  // Sends m without waiting for a reply; dropped when the task cannot take it now (no
  // connection to it: it is gone, or refused this one's keys).
  void post(message& m) {
    m.h.id = ++last_id_;
    (void)send_within(m, std::chrono::milliseconds(0));
  }
  std::optional<message> poll(std::chrono::milliseconds timeout) {
    return heard(receive(socket_, timeout));
  }
  // When the task last sent anything (a reply to any request).
  [[nodiscard]] std::chrono::steady_clock::time_point last_heard() const noexcept {
    return last_heard_;
  }

  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  static std::string seconds(std::chrono::milliseconds d) {
    const auto ms = d.count();
    return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
  }
  // A DEALER's send blocks while it has no connection (one whose handshake failed is dropped,
  // not queued): wait up to `timeout` for it to take the message, else leave it unsent.
  bool send_within(message& m, std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLOUT, 0};
    if (zmq::poll(&item, 1, timeout) == 0) {
      m.frames.clear();
      return false;
    }
    send(socket_, m);
    return true;
  }
  std::optional<message> heard(std::optional<message> m) {
    if (m) last_heard_ = std::chrono::steady_clock::now();
    return m;
  }
  zmq::socket_t socket_;
  std::string address_, name_;
  std::uint64_t last_id_ = 0;
  std::chrono::steady_clock::time_point last_heard_ = std::chrono::steady_clock::now();
};

// A reply to `request`: its kind unless given, its id.
inline message reply_to(const message& request, kind what) {
  message r;
  r.h.what = what;
  r.h.id = request.h.id;
  return r;
}
inline message failure(const message& request, const std::string& why) {
  message r = reply_to(request, kind::failed);
  r.frames.push_back(frame_of(why));
  return r;
}

}  // namespace tessel::ps
