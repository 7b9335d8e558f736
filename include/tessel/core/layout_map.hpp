// layout_map: variable and output paths to layouts, matched like Keras 3's LayoutMap.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "diagnostics.hpp"
#include "regex.hpp"
#include "tensor_layout.hpp"

namespace tessel {

inline constexpr std::size_t max_key_length = 63;
using key_string = fixed_string<max_key_length + 1>;

// One entry: layout_map["d1/kernel"] = (None, "model") is rule<"d1/kernel", none, "model">.
template <fixed_string Key, dim_spec... Specs>
struct rule {
  static_assert(Key.size() <= max_key_length, "tessel::rule: keys are at most 63 characters");
  static constexpr key_string key{Key.view()};
  static constexpr std::size_t rank = sizeof...(Specs);
  static constexpr std::array<dim_spec, rank> specs{Specs...};
  template <class Mesh>
  using layout = tensor_layout<Mesh, Specs...>;
};

// What lookup_t gives when no key matches: the variable is replicated (Keras returns None).
struct unmatched {};

// A rule as a value, for constexpr lookups.
struct rule_value {
  key_string key{};
  layout_value layout{};
};

struct lookup_result {
  enum kind_t : std::uint8_t { none_matched, exact, pattern, ambiguous } kind = none_matched;
  std::size_t index = 0;   // the matching rule
  std::size_t second = 0;  // with `ambiguous`: the other matching rule
};

// Keras LayoutMap.__getitem__: an exact key wins; else every key is a regular expression that
// must match the whole path (re.fullmatch); two matches are an error, none means replicated.
template <std::size_t N>
constexpr lookup_result lookup(const std::array<rule_value, N>& rules, std::size_t count,
                               std::string_view path) noexcept {
  for (std::size_t i = 0; i < count; ++i)
    if (rules[i].key.view() == path) return {lookup_result::exact, i, 0};
  lookup_result r;
  for (std::size_t i = 0; i < count; ++i) {
    if (!regex::full_match(rules[i].key.view(), path)) continue;
    if (r.kind == lookup_result::pattern) return {lookup_result::ambiguous, r.index, i};
    r = {lookup_result::pattern, i, 0};
  }
  return r;
}

namespace detail {
enum class map_error : std::uint8_t { none, unknown_axis, axis_twice, bad_regex, duplicate_key };
struct map_check {
  map_error error = map_error::none;
  key_string key{};
  name_string axis{};
  std::size_t position = 0;
};
}  // namespace detail

template <class Mesh, class... Rules>
struct layout_map {
  static_assert(detail::is_device_mesh<Mesh>,
                "tessel::layout_map: the first argument must be a tessel::device_mesh<...>");
  using mesh = Mesh;
  static constexpr std::size_t size = sizeof...(Rules);

 private:
  static constexpr detail::map_check check_ = [] {
    detail::map_check r;
    const std::array<key_string, size> keys{Rules::key...};
    auto visit = [&]<class R>(std::size_t i) {
      if (r.error != detail::map_error::none) return;
      for (std::size_t j = 0; j < i; ++j)
        if (keys[j] == R::key) {
          r = {detail::map_error::duplicate_key, R::key, {}, 0};
          return;
        }
      if (const auto c = detail::check_specs(Mesh::value, R::specs);
          c.error != detail::spec_error::none) {
        r = {c.error == detail::spec_error::axis_twice ? detail::map_error::axis_twice
                                                       : detail::map_error::unknown_axis,
             R::key, c.name, 0};
        return;
      }
      if (const auto v = regex::validate(R::key.view()); !v.ok)
        r = {detail::map_error::bad_regex, R::key, {}, v.position};
    };
    std::size_t i = 0;
    (visit.template operator()<Rules>(i++), ...);
    (void)visit;  // a map with no rules
    (void)i;
    return r;
  }();
  static_assert(require<check_.error != detail::map_error::duplicate_key,
                        diagnostic::duplicate_layout_map_key<check_.key>>);
  static_assert(require<check_.error != detail::map_error::unknown_axis,
                        diagnostic::layout_map_rule_names_unknown_axis<check_.key, check_.axis>>);
  static_assert(require<check_.error != detail::map_error::axis_twice,
                        diagnostic::layout_map_rule_uses_axis_twice<check_.key, check_.axis>>);
  static_assert(require<check_.error != detail::map_error::bad_regex,
                        diagnostic::unsupported_regex_in_layout_map_key<check_.key,
                                                                        check_.position>>);
  static constexpr bool valid_ = check_.error == detail::map_error::none;

 public:
  // The rules as values (empty when the map is invalid, which has already failed to compile).
  static constexpr std::array<rule_value, size> rules = [] {
    std::array<rule_value, size> r{};
    if constexpr (valid_) {
      std::size_t i = 0;
      ((r[i++] = rule_value{Rules::key, detail::check_specs(Mesh::value, Rules::specs).layout}),
       ...);
    }
    return r;
  }();
  using layouts = std::tuple<std::conditional_t<valid_, typename Rules::template layout<Mesh>,
                                                unmatched>...>;

  static constexpr lookup_result find(std::string_view path) noexcept {
    return lookup(rules, size, path);
  }
  // The key of rule i (empty for a map without rules).
  static constexpr key_string key_at(std::size_t i) noexcept {
    if constexpr (size == 0) return {};
    else return rules[i].key;
  }
};

namespace detail {
template <class T>
inline constexpr bool is_layout_map = false;
template <class M, class... R>
inline constexpr bool is_layout_map<layout_map<M, R...>> = true;

template <class Map, fixed_string Path>
struct lookup_impl {
  static_assert(is_layout_map<Map>, "tessel::lookup_t: the first argument must be a layout_map");
  static constexpr lookup_result found = Map::find(Path.view());
  static_assert(require<found.kind != lookup_result::ambiguous,
                        diagnostic::path_matches_two_layout_map_keys<
                            Path, Map::key_at(found.index), Map::key_at(found.second)>>);
  using type = std::conditional_t<
      found.kind == lookup_result::none_matched || found.kind == lookup_result::ambiguous,
      unmatched,
      std::tuple_element_t<(found.kind == lookup_result::none_matched ? 0 : found.index),
                           std::conditional_t<Map::size == 0, std::tuple<unmatched>,
                                              typename Map::layouts>>>;
};
}  // namespace detail

// The tensor_layout whose key matches Path, or tessel::unmatched.
template <class Map, fixed_string Path>
using lookup_t = typename detail::lookup_impl<Map, Path>::type;

}  // namespace tessel
