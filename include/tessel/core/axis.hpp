// axis: one named axis of a device mesh, with a static size or a size given at run time.
#pragma once

#include <cstddef>
#include <limits>

#include "diagnostics.hpp"
#include "fixed_string.hpp"

namespace tessel {

// Like std::dynamic_extent: the size is known only at run time.
inline constexpr std::size_t dynamic_extent = std::numeric_limits<std::size_t>::max();

template <fixed_string Name, std::size_t Size = dynamic_extent>
struct axis {
  static_assert(require<Size != 0, diagnostic::axis_size_must_be_positive<Name>>);
  static_assert(require<!Name.empty(), diagnostic::axis_name_must_not_be_empty<0>>);
  static_assert(Name.size() <= max_name_length, "tessel::axis: axis names are at most 31 characters");

  static constexpr name_string name{Name.view()};
  static constexpr std::size_t size = Size;
  static constexpr bool is_static = Size != dynamic_extent;
};

namespace detail {
template <class T>
inline constexpr bool is_axis = false;
template <fixed_string N, std::size_t S>
inline constexpr bool is_axis<axis<N, S>> = true;
}  // namespace detail

}  // namespace tessel
