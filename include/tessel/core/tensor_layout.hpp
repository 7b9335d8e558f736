// tensor_layout: for each tensor dimension, the mesh axes it is split over (Keras TensorLayout).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "compilation.hpp"
#include "device_mesh.hpp"
#include "diagnostics.hpp"
#include "shape.hpp"

namespace tessel {

struct none_t {
  constexpr bool operator==(const none_t&) const = default;
};
// A replicated dimension (Keras/JAX `None`).
inline constexpr none_t none{};

inline constexpr std::size_t max_axes_per_dim = 4;

// What the user writes for one dimension: none, "axis", or axes<"a", "b"> (major to minor).
struct dim_spec {
  std::array<name_string, max_axes_per_dim> names{};
  std::size_t count = 0;

  constexpr dim_spec() = default;
  constexpr dim_spec(none_t) noexcept {}  // NOLINT(google-explicit-constructor)
  template <std::size_t M>
    requires(M <= max_name_length + 1)
  constexpr dim_spec(const char (&s)[M]) noexcept  // NOLINT(google-explicit-constructor)
      : names{name_string(s)}, count(1) {}
};

// One dimension split over several mesh axes, major to minor (JAX PartitionSpec(("a", "b"))).
template <fixed_string... Names>
  requires(sizeof...(Names) >= 1 && sizeof...(Names) <= max_axes_per_dim)
inline constexpr dim_spec axes = [] {
  dim_spec d;
  ((d.names[d.count++] = name_string(Names.view())), ...);
  return d;
}();

// How one dimension is sharded, as indices of mesh axes, major to minor.
struct dim_sharding {
  std::array<std::uint8_t, max_axes_per_dim> axes{};
  std::uint8_t count = 0;

  [[nodiscard]] constexpr std::uint32_t mask() const noexcept {
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < count; ++i) m |= 1u << axes[i];
    return m;
  }
  [[nodiscard]] constexpr bool empty() const noexcept { return count == 0; }
  [[nodiscard]] constexpr bool is_prefix_of(const dim_sharding& o) const noexcept {
    if (count > o.count) return false;
    for (std::size_t i = 0; i < count; ++i)
      if (axes[i] != o.axes[i]) return false;
    return true;
  }
  constexpr void push(std::uint8_t a) noexcept { axes[count++] = a; }
  constexpr void pop() noexcept { axes[--count] = 0; }
  constexpr bool operator==(const dim_sharding& o) const noexcept {
    return count == o.count && is_prefix_of(o);
  }
};

// A layout as a value: per-dimension sharding, plus the mesh axes over which the tensor is
// partial (every device holds a summand of the true value; only the planner produces these).
struct layout_value {
  std::size_t rank = 0;
  std::array<dim_sharding, max_rank> dims{};
  std::uint32_t partial = 0;

  [[nodiscard]] static constexpr layout_value replicated(std::size_t rank) noexcept {
    layout_value l;
    l.rank = rank;
    return l;
  }
  // Sharded on `axis` along `dim`, replicated elsewhere.
  [[nodiscard]] static constexpr layout_value sharded(std::size_t rank, std::size_t dim,
                                                      std::uint8_t axis) noexcept {
    layout_value l = replicated(rank);
    l.dims[dim].push(axis);
    return l;
  }
  [[nodiscard]] constexpr std::uint32_t sharded_axes() const noexcept {
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < rank; ++i) m |= dims[i].mask();
    return m;
  }
  [[nodiscard]] constexpr std::uint32_t used_axes() const noexcept {
    return sharded_axes() | partial;
  }
  // The dimension sharded over mesh axis `a`, or -1.
  [[nodiscard]] constexpr int dim_of(std::size_t a) const noexcept {
    for (std::size_t i = 0; i < rank; ++i)
      if (dims[i].mask() & (1u << a)) return static_cast<int>(i);
    return -1;
  }
  [[nodiscard]] constexpr layout_value without_partial() const noexcept {
    layout_value l = *this;
    l.partial = 0;
    return l;
  }
  [[nodiscard]] constexpr bool is_replicated() const noexcept { return used_axes() == 0; }
  constexpr bool operator==(const layout_value& o) const noexcept {
    if (rank != o.rank || partial != o.partial) return false;
    for (std::size_t i = 0; i < rank; ++i)
      if (!(dims[i] == o.dims[i])) return false;
    return true;
  }
};

// "('data', None)", "(('data', 'model'), None)", with " partial over ('model',)" when partial.
TESSEL_INLINE std::string to_string(const layout_value& l, const mesh_value& m);

namespace detail {

// Whether dimension d's extent and the sizes of the axes sharding it are all static, so its shard
// size is known when the program compiles.
constexpr bool shard_size_is_static(const layout_value& l, const mesh_value& m,
                                    const shape_value& s, std::size_t d) noexcept {
  if (s.extents[d] == dynamic_extent) return false;
  for (std::size_t k = 0; k < l.dims[d].count; ++k)
    if (m.sizes[l.dims[d].axes[k]] == dynamic_extent) return false;
  return true;
}

enum class spec_error : std::uint8_t { none, unknown_axis, axis_twice };

struct spec_check {
  spec_error error = spec_error::none;
  name_string name{};
  layout_value layout{};
};

// Validates dimension specs against a mesh and builds the layout value.
constexpr spec_check check_specs(const mesh_value& mesh, const dim_spec* specs,
                                 std::size_t n) noexcept {
  spec_check r;
  r.layout.rank = n;
  std::uint32_t used = 0;
  for (std::size_t d = 0; d < n; ++d) {
    for (std::size_t k = 0; k < specs[d].count; ++k) {
      const int a = mesh.index_of(specs[d].names[k].view());
      if (a < 0) return {spec_error::unknown_axis, specs[d].names[k], {}};
      if (used & (1u << a)) return {spec_error::axis_twice, specs[d].names[k], {}};
      used |= 1u << a;
      r.layout.dims[d].push(static_cast<std::uint8_t>(a));
    }
  }
  return r;
}

template <std::size_t N>
constexpr spec_check check_specs(const mesh_value& mesh, const std::array<dim_spec, N>& s) noexcept {
  return check_specs(mesh, s.data(), N);
}

}  // namespace detail

template <class Mesh, dim_spec... Specs>
struct tensor_layout {
  static_assert(detail::is_device_mesh<Mesh>,
                "tessel::tensor_layout: the first argument must be a tessel::device_mesh<...>");
  static_assert(sizeof...(Specs) <= max_rank, "tessel::tensor_layout: at most 8 dimensions");

 private:
  static constexpr std::array<dim_spec, sizeof...(Specs)> specs_{Specs...};
  static constexpr detail::spec_check check_ = detail::check_specs(Mesh::value, specs_);
  static_assert(require<check_.error != detail::spec_error::unknown_axis,
                        diagnostic::axis_not_in_mesh<check_.name, Mesh>>);
  static_assert(require<check_.error != detail::spec_error::axis_twice,
                        diagnostic::axis_used_twice_in_layout<check_.name>>);

 public:
  using mesh = Mesh;
  static constexpr std::size_t rank = sizeof...(Specs);
  static constexpr layout_value value = check_.layout;
};

namespace detail {
template <class T>
inline constexpr bool is_tensor_layout = false;
template <class M, dim_spec... S>
inline constexpr bool is_tensor_layout<tensor_layout<M, S...>> = true;
}  // namespace detail

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE std::string to_string(const layout_value& l, const mesh_value& m) {
  // Built with append only: gcc 12 warns wrongly (-Wrestrict) on `"'" + std::string(...)`.
  std::string s = "(";
  auto quoted = [&](std::size_t a) {
    s.push_back('\'');
    s.append(m.names[a].view());
    s.push_back('\'');
  };
  for (std::size_t i = 0; i < l.rank; ++i) {
    if (i) s.append(", ");
    const auto& d = l.dims[i];
    if (d.count == 0) {
      s.append("None");
    } else if (d.count == 1) {
      quoted(d.axes[0]);
    } else {
      s.push_back('(');
      for (std::size_t k = 0; k < d.count; ++k) {
        if (k) s.append(", ");
        quoted(d.axes[k]);
      }
      s.push_back(')');
    }
  }
  s.append(l.rank == 1 ? ",)" : ")");
  if (l.partial) {
    s.append(" partial over (");
    bool first = true;
    for (std::size_t a = 0; a < m.rank; ++a)
      if (l.partial & (1u << a)) {
        if (!first) s.append(", ");
        quoted(a);
        first = false;
      }
    s.push_back(')');
  }
  return s;
}
#endif

}  // namespace tessel
