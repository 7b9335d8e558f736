// shape: the global extents of a tensor, static or dynamic_extent (the run-time batch).
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "axis.hpp"
#include "compilation.hpp"

namespace tessel {

inline constexpr std::size_t max_rank = 8;

struct shape_value {
  std::size_t rank = 0;
  std::array<std::size_t, max_rank> extents{};

  constexpr shape_value() = default;
  constexpr shape_value(std::initializer_list<std::size_t> e) noexcept : rank(e.size()) {
    std::size_t i = 0;
    for (auto x : e) extents[i++] = x;
  }
  [[nodiscard]] constexpr std::size_t operator[](std::size_t i) const noexcept { return extents[i]; }
  [[nodiscard]] constexpr bool is_static() const noexcept {
    for (std::size_t i = 0; i < rank; ++i)
      if (extents[i] == dynamic_extent) return false;
    return true;
  }
  [[nodiscard]] constexpr std::size_t elements() const noexcept {
    std::size_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) n *= extents[i];
    return n;
  }
  // The same shape with dynamic extents (the batch) replaced by n.
  [[nodiscard]] constexpr shape_value with_batch(std::size_t n) const noexcept {
    shape_value s = *this;
    for (std::size_t i = 0; i < rank; ++i)
      if (s.extents[i] == dynamic_extent) s.extents[i] = n;
    return s;
  }
  constexpr bool operator==(const shape_value& o) const noexcept {
    if (rank != o.rank) return false;
    for (std::size_t i = 0; i < rank; ++i)
      if (extents[i] != o.extents[i]) return false;
    return true;
  }
};

// "(None, 784)" as Keras prints shapes.
TESSEL_INLINE std::string to_string(const shape_value& s);

template <std::size_t... Extents>
struct shape {
  static_assert(sizeof...(Extents) <= max_rank, "tessel::shape: at most 8 dimensions");
  static constexpr std::size_t rank = sizeof...(Extents);
  static constexpr shape_value value{Extents...};
};

#if TESSEL_DEFINITIONS
TESSEL_INLINE std::string to_string(const shape_value& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.rank; ++i) {
    if (i) r += ", ";
    r += s.extents[i] == dynamic_extent ? std::string("None") : std::to_string(s.extents[i]);
  }
  return r + (s.rank == 1 ? ",)" : ")");
}
#endif

}  // namespace tessel
