// fixed_string: a string literal usable as a template argument (axis names, layout_map keys).
#pragma once

#include <cstddef>
#include <string_view>

namespace tessel {

template <std::size_t N>
struct fixed_string {
  char data[N]{};

  constexpr fixed_string() = default;

  // From a literal of at most N characters (with its terminator); a longer one does not compile.
  template <std::size_t M>
    requires(M <= N)
  constexpr fixed_string(const char (&s)[M]) noexcept {  // NOLINT(google-explicit-constructor)
    for (std::size_t i = 0; i < M; ++i) data[i] = s[i];
  }

  constexpr fixed_string(std::string_view s) noexcept {  // NOLINT(google-explicit-constructor)
    for (std::size_t i = 0; i < s.size() && i + 1 < N; ++i) data[i] = s[i];
  }

  [[nodiscard]] constexpr std::size_t size() const noexcept {
    std::size_t n = 0;
    while (n < N && data[n] != '\0') ++n;
    return n;
  }
  [[nodiscard]] constexpr bool empty() const noexcept { return N == 0 || data[0] == '\0'; }
  [[nodiscard]] constexpr std::string_view view() const noexcept { return {data, size()}; }
  constexpr operator std::string_view() const noexcept { return view(); }  // NOLINT

  template <std::size_t M>
  constexpr bool operator==(const fixed_string<M>& o) const noexcept {
    return view() == o.view();
  }
};

template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N>;

// Names stored inside values (dimension specs, plans) have one fixed capacity so that the values
// are of one type; 31 characters is ample for mesh axis and layer names.
inline constexpr std::size_t max_name_length = 31;
using name_string = fixed_string<max_name_length + 1>;

// Concatenation of two compile-time strings ("d1" + "/output").
template <fixed_string A, fixed_string B>
inline constexpr auto concat = [] {
  constexpr std::size_t a = A.size(), b = B.size();
  fixed_string<a + b + 1> r{};
  for (std::size_t i = 0; i < a; ++i) r.data[i] = A.data[i];
  for (std::size_t i = 0; i < b; ++i) r.data[a + i] = B.data[i];
  return r;
}();

}  // namespace tessel
