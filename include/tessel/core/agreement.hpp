// agreement: what every process of a distributed job must hold alike, as named values. Under a
// distribution every process feeds the same global data stream and each takes its block of every
// batch, so the number of samples, the batch size, the shuffle seed, the compiled loss ... must be
// equal everywhere: a process that differs would run other collectives than the rest, and the job
// would fail inside MPI or hang. The data and the trainer describe what they hold as facts;
// runtime::require_agreement (runtime/agreement.hpp) compares them across the processes before
// the first step and names what differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

namespace tessel {

// One named value. A number is shown as it is; a fingerprint (a checksum of values, a hash of a
// name) only tells which processes hold the same one.
struct fact {
  enum class kind : std::uint8_t { number, signed_number, fingerprint };
  std::string what;  // as a message names it: "the batch size"
  std::uint64_t value = 0;
  kind shown = kind::number;

  static fact number(std::string what, std::uint64_t v) {
    return {std::move(what), v, kind::number};
  }
  static fact signed_number(std::string what, std::int64_t v) {
    return {std::move(what), static_cast<std::uint64_t>(v), kind::signed_number};
  }
  static fact fingerprint(std::string what, std::uint64_t v) {
    return {std::move(what), v, kind::fingerprint};
  }
};

// FNV-1a over bytes, chained: fingerprint(bytes, fingerprint(other)) hashes both.
class hasher {
 public:
  hasher& bytes(const void* p, std::size_t n) noexcept {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 0x100000001b3ULL;
    return *this;
  }
  hasher& text(std::string_view s) noexcept { return value(s.size()).bytes(s.data(), s.size()); }
  template <class T>
    requires std::is_arithmetic_v<T>
  hasher& value(T v) noexcept {
    return bytes(&v, sizeof v);
  }
  template <class T>
    requires std::is_arithmetic_v<T>
  hasher& values(std::span<const T> v) noexcept {
    return bytes(v.data(), v.size_bytes());
  }
  [[nodiscard]] std::uint64_t result() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

// A shape as a fact's value: its rank and extents, hashed.
inline std::uint64_t shape_fingerprint(std::span<const std::size_t> shape) noexcept {
  hasher h;
  for (const std::size_t d : shape) h.value(d);
  return h.value(shape.size()).result();
}

// A configured object (a loss, a metric) as a fact's value: its type, its name, the numbers
// `more`, and its get_config() when it has one, hashed.
template <class T, class... More>
std::uint64_t object_fingerprint(const T& object, std::string_view name, More... more) {
  hasher h;
  h.text(typeid(T).name()).text(name);
  (h.value(more), ...);
  if constexpr (requires { object.get_config(); }) h.text(object.get_config());
  return h.result();
}

}  // namespace tessel
