// device_mesh: a logical grid of devices with named axes (Keras DeviceMesh), as a type.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "axis.hpp"
#include "compilation.hpp"
#include "errors.hpp"

namespace tessel {

inline constexpr std::size_t max_mesh_rank = 8;

// The mesh as a plain value, for constexpr planning: names and sizes (dynamic_extent if unknown).
struct mesh_value {
  std::size_t rank = 0;
  std::array<name_string, max_mesh_rank> names{};
  std::array<std::size_t, max_mesh_rank> sizes{};

  [[nodiscard]] constexpr int index_of(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < rank; ++i)
      if (names[i].view() == name) return static_cast<int>(i);
    return -1;
  }
  [[nodiscard]] constexpr bool is_static() const noexcept {
    for (std::size_t i = 0; i < rank; ++i)
      if (sizes[i] == dynamic_extent) return false;
    return true;
  }
  // Number of devices; dynamic_extent when some axis size is not known.
  [[nodiscard]] constexpr std::size_t size() const noexcept {
    std::size_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) {
      if (sizes[i] == dynamic_extent) return dynamic_extent;
      n *= sizes[i];
    }
    return n;
  }
  // Product of the sizes of the axes in a bitmask.
  [[nodiscard]] constexpr std::size_t size_of(std::uint32_t axes_mask) const noexcept {
    std::size_t n = 1;
    for (std::size_t i = 0; i < rank; ++i)
      if (axes_mask & (1u << i)) n *= sizes[i];
    return n;
  }
  constexpr bool operator==(const mesh_value&) const = default;
};

// "data=2 x model=4"
TESSEL_INLINE std::string to_string(const mesh_value& m);

namespace detail {
template <class... Axes>
constexpr int first_duplicate_axis() {
  constexpr std::array<std::string_view, sizeof...(Axes)> n{Axes::name.view()...};
  for (std::size_t i = 0; i < n.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (n[i] == n[j]) return static_cast<int>(i);
  return -1;
}
template <int I, class... Axes>
struct axis_at {
  static constexpr name_string name{};
};
template <int I, class... Axes>
  requires(I >= 0)
struct axis_at<I, Axes...> {
  static constexpr std::array<name_string, sizeof...(Axes)> names{Axes::name...};
  static constexpr name_string name = names[I];
};
}  // namespace detail

template <class... Axes>
class device_mesh {
  static_assert(require<(sizeof...(Axes) > 0), diagnostic::device_mesh_needs_at_least_one_axis<0>>);
  static_assert((detail::is_axis<Axes> && ...),
                "tessel::device_mesh: every argument must be a tessel::axis<\"name\", size>");
  static_assert(sizeof...(Axes) <= max_mesh_rank, "tessel::device_mesh: at most 8 axes");
  static constexpr int duplicate_ = detail::first_duplicate_axis<Axes...>();
  static_assert(require<duplicate_ < 0, diagnostic::duplicate_mesh_axis<
                                            detail::axis_at<duplicate_, Axes...>::name>>);

 public:
  static constexpr std::size_t rank = sizeof...(Axes);
  static constexpr std::size_t rank_dynamic = ((Axes::is_static ? 0 : 1) + ... + 0);
  static constexpr bool is_static = rank_dynamic == 0;
  static constexpr mesh_value value = [] {
    mesh_value v{};
    v.rank = rank;
    std::size_t i = 0;
    ((v.names[i] = Axes::name, v.sizes[i] = Axes::size, ++i), ...);
    return v;
  }();
  static constexpr std::array<name_string, rank> axis_names{Axes::name...};
  static constexpr std::array<std::size_t, rank> static_sizes{Axes::size...};

  // Index of the axis called Name, or -1.
  template <fixed_string Name>
  static constexpr int index_of = value.index_of(Name.view());
  static constexpr int find(std::string_view name) noexcept { return value.index_of(name); }

  // A mesh whose sizes are all static needs no arguments.
  constexpr device_mesh() noexcept
    requires(is_static)
      : sizes_(static_sizes) {}

  // The run-time sizes of the dynamic axes, in order: device_mesh<axis<"batch">>{8}.
  template <class... Sizes>
    requires(sizeof...(Sizes) == rank_dynamic && rank_dynamic > 0 &&
             (std::is_convertible_v<Sizes, std::size_t> && ...))
  explicit device_mesh(Sizes... dynamic_sizes) {
    const std::array<std::size_t, rank_dynamic> d{static_cast<std::size_t>(dynamic_sizes)...};
    std::size_t k = 0;
    for (std::size_t i = 0; i < rank; ++i) {
      sizes_[i] = static_sizes[i] == dynamic_extent ? d[k++] : static_sizes[i];
      if (sizes_[i] == 0 || sizes_[i] == dynamic_extent)
        throw value_error("tessel::device_mesh: axis '" + std::string(axis_names[i].view()) +
                          "' was given size " + std::to_string(d[k - 1]) +
                          "; every mesh axis needs a size >= 1");
    }
  }

  // Keras DataParallel(devices=...): size the single dynamic axis so that the mesh covers
  // `devices` devices; the static axes must divide it.
  static device_mesh for_devices(std::size_t devices)
    requires(rank_dynamic <= 1)
  {
    std::size_t fixed = 1;
    for (std::size_t i = 0; i < rank; ++i)
      if (static_sizes[i] != dynamic_extent) fixed *= static_sizes[i];
    if constexpr (rank_dynamic == 0) {
      device_mesh m;
      m.check_device_count(devices);
      return m;
    } else {
      if (devices == 0)
        throw value_error("tessel::device_mesh: no devices to lay on mesh " + to_string(value) +
                          "; launch at least " + std::to_string(fixed) + " process(es)");
      if (devices % fixed != 0)
        throw value_error("tessel::device_mesh: cannot lay " + std::to_string(devices) +
                          " devices on mesh " + to_string(value) + ": the static axes hold " +
                          std::to_string(fixed) + " devices, which does not divide " +
                          std::to_string(devices) + "; launch a multiple of " +
                          std::to_string(fixed) + " processes or change the mesh shape");
      return device_mesh(devices / fixed);
    }
  }

  [[nodiscard]] constexpr std::size_t extent(std::size_t i) const noexcept { return sizes_[i]; }
  template <fixed_string Name>
  [[nodiscard]] constexpr std::size_t extent() const noexcept {
    static_assert(require<(index_of<Name> >= 0), diagnostic::axis_not_in_mesh<Name, device_mesh>>);
    return sizes_[index_of<Name>];
  }
  [[nodiscard]] constexpr std::size_t size() const noexcept {
    std::size_t n = 1;
    for (auto s : sizes_) n *= s;
    return n;
  }
  // The mesh with its run-time sizes filled in, for planning and printing.
  [[nodiscard]] constexpr mesh_value shape() const noexcept {
    mesh_value v = value;
    for (std::size_t i = 0; i < rank; ++i) v.sizes[i] = sizes_[i];
    return v;
  }

  // Devices are ordered row-major over the mesh shape, as in Keras and JAX.
  [[nodiscard]] constexpr std::array<std::size_t, rank> coordinates(std::size_t device) const {
    std::array<std::size_t, rank> c{};
    for (std::size_t i = rank; i-- > 0;) {
      c[i] = device % sizes_[i];
      device /= sizes_[i];
    }
    return c;
  }
  [[nodiscard]] constexpr std::size_t device_at(const std::array<std::size_t, rank>& c) const {
    std::size_t d = 0;
    for (std::size_t i = 0; i < rank; ++i) d = d * sizes_[i] + c[i];
    return d;
  }

  // A mesh must cover exactly the devices of the job.
  void check_device_count(std::size_t devices) const {
    if (size() != devices)
      throw value_error("tessel::device_mesh: the mesh " + to_string(shape()) + " has " +
                        std::to_string(size()) + " devices but the job has " +
                        std::to_string(devices) + (devices == 1 ? " process" : " processes") +
                        "; launch with `mpiexec -n " +
                        std::to_string(size()) + "` or change the mesh shape");
  }

 private:
  std::array<std::size_t, rank> sizes_{};
};

namespace detail {
template <class T>
inline constexpr bool is_device_mesh = false;
template <class... A>
inline constexpr bool is_device_mesh<device_mesh<A...>> = true;
}  // namespace detail

#if TESSEL_DEFINITIONS
TESSEL_INLINE std::string to_string(const mesh_value& m) {
  std::string s;
  for (std::size_t i = 0; i < m.rank; ++i) {
    if (i) s += " x ";
    s += m.names[i].view();
    s += '=';
    s += m.sizes[i] == dynamic_extent ? std::string("?") : std::to_string(m.sizes[i]);
  }
  return s;
}
#endif

}  // namespace tessel
