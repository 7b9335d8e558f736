// Constexpr regular-expression subset with Python re.fullmatch semantics, for layout_map keys.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "compilation.hpp"

namespace tessel::regex {

struct parse_result {
  bool ok;                   // true when the pattern is within the supported subset
  std::size_t position;      // offset in the pattern of the first offending character (0 when ok)
  std::string_view message;  // short reason; empty when ok
};

namespace detail {

// Hot paths index through raw pointers: in constant evaluation every string_view::operator[] is
// a function call with an assertion, which made matching several times more expensive.

// Character predicates use ASCII semantics: the engine works on bytes, and layout paths are
// ASCII. Bytes >= 0x80 are never digits, word or space characters.
constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
constexpr bool is_alpha(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
constexpr bool is_word(char c) noexcept { return is_alpha(c) || is_digit(c) || c == '_'; }
// Python's str \s also matches the ASCII separators \x1c-\x1f (str.isspace()), so we do too.
constexpr bool is_space(char c) noexcept {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

constexpr bool is_set_escape(char e) noexcept {
  return e == 'd' || e == 'w' || e == 's' || e == 'D' || e == 'W' || e == 'S';
}

// Precondition: is_set_escape(e).
constexpr bool set_escape_matches(char e, char c) noexcept {
  switch (e) {
    case 'd':
      return is_digit(c);
    case 'D':
      return !is_digit(c);
    case 'w':
      return is_word(c);
    case 'W':
      return !is_word(c);
    case 's':
      return is_space(c);
    default:
      return !is_space(c);
  }
}

constexpr bool is_quantifier(char c) noexcept { return c == '*' || c == '+' || c == '?'; }

// Conservative: ']' and '}' are literal outside a class in Python but read like syntax.
constexpr bool is_metacharacter(char c) noexcept {
  switch (c) {
    case '\\':
    case '.':
    case '^':
    case '$':
    case '*':
    case '+':
    case '?':
    case '(':
    case ')':
    case '[':
    case ']':
    case '{':
    case '}':
    case '|':
      return true;
    default:
      return false;
  }
}

constexpr bool has_metacharacter(std::string_view pattern) noexcept {
  const char* const p = pattern.data();
  for (std::size_t i = 0; i < pattern.size(); ++i)
    if (is_metacharacter(p[i])) return true;
  return false;
}

// Non-literal patterns are limited so that a set of NFA states fits in four machine words.
inline constexpr std::size_t max_pattern_size = 255;

constexpr parse_result error(std::size_t position, std::string_view message) noexcept {
  return {false, position, message};
}

// Diagnoses the escape at p[i] == '\\'; shared by the top level and [...] classes so that both
// accept exactly the same escapes.
constexpr parse_result check_escape(std::string_view p, std::size_t i) noexcept {
  if (i + 1 >= p.size()) return error(i, "dangling backslash");
  const char e = p.data()[i + 1];
  if (e >= '1' && e <= '9') return error(i, "backreferences are not supported");
  if ((is_alpha(e) && !is_set_escape(e)) || e == '0') return error(i, "unsupported escape");
  return {true, 0, {}};
}

// Validates the class whose '[' is at p[i]; on success `position` is the offset just past ']'.
// Mirrors Python: a ']' right after '[' or '[^' is literal, and '-' first or last is literal.
constexpr parse_result check_class(std::string_view pattern, std::size_t i) noexcept {
  const char* const p = pattern.data();
  const std::size_t n = pattern.size();
  std::size_t j = i + 1;
  if (j < n && p[j] == '^') ++j;
  bool first = true;
  for (;;) {
    if (j >= n) return error(i, "unterminated [...] class");
    if (p[j] == ']' && !first) return {true, j + 1, {}};
    first = false;
    const std::size_t lo_pos = j;
    bool lo_is_set = false;
    char lo = p[j];
    if (lo == '\\') {
      if (auto r = check_escape(pattern, j); !r.ok) return r;
      lo = p[j + 1];
      lo_is_set = is_set_escape(lo);
      j += 2;
    } else {
      ++j;
    }
    if (j + 1 < n && p[j] == '-' && p[j + 1] != ']') {
      ++j;
      bool hi_is_set = false;
      char hi = p[j];
      if (hi == '\\') {
        if (auto r = check_escape(pattern, j); !r.ok) return r;
        hi = p[j + 1];
        hi_is_set = is_set_escape(hi);
        j += 2;
      } else {
        ++j;
      }
      if (lo_is_set || hi_is_set || static_cast<unsigned char>(hi) < static_cast<unsigned char>(lo))
        return error(lo_pos, "bad character range");
    }
  }
}

// Everything below assumes a validated pattern, so the scans need no bounds checks beyond what the
// grammar guarantees (every '[' and '(' is closed, every '\\' has a successor).

// Offset just past the ']' of the class opened at p[i].
constexpr std::size_t class_end(const char* p, std::size_t i) noexcept {
  std::size_t j = i + 1;
  if (p[j] == '^') ++j;
  if (p[j] == ']') ++j;
  while (p[j] != ']') j += p[j] == '\\' ? 2 : 1;
  return j + 1;
}

// Whether the class opened at p[i] matches c.
constexpr bool class_matches(const char* p, std::size_t i, char c) noexcept {
  const auto uc = static_cast<unsigned char>(c);
  std::size_t j = i + 1;
  const bool negated = p[j] == '^';
  if (negated) ++j;
  bool first = true;
  while (p[j] != ']' || first) {
    first = false;
    char lo = p[j];
    if (lo == '\\') {
      lo = p[j + 1];
      j += 2;
      if (is_set_escape(lo)) {
        if (set_escape_matches(lo, c)) return !negated;
        continue;  // validate() rejects ranges with a set endpoint
      }
    } else {
      ++j;
    }
    if (p[j] == '-' && p[j + 1] != ']') {
      char hi = p[j + 1];
      if (hi == '\\') {
        hi = p[j + 2];
        j += 3;
      } else {
        j += 2;
      }
      if (uc >= static_cast<unsigned char>(lo) && uc <= static_cast<unsigned char>(hi))
        return !negated;
    } else if (c == lo) {
      return !negated;
    }
  }
  return negated;
}

// Whether the single-character atom (literal, '.', escape or class) at p[i] matches c.
constexpr bool char_matches(const char* p, std::size_t i, char c) noexcept {
  switch (p[i]) {
    case '.':
      return c != '\n';
    case '[':
      return class_matches(p, i, c);
    case '\\':
      return is_set_escape(p[i + 1]) ? set_escape_matches(p[i + 1], c) : c == p[i + 1];
    default:
      return c == p[i];
  }
}

// Thompson-style NFA simulated directly on the pattern text. A backtracking matcher needs
// constexpr call depth proportional to path length times group nesting, which overflows gcc's
// default -fconstexpr-depth=512 on 64-character paths with looped groups, and it can take
// exponential time; this needs no recursion and runs in O(|pattern| * |text|) after an
// O(|pattern|^2) worst-case setup.
//
// States are pattern offsets: the start of an atom (about to match it), a '|' (a branch just
// ended), a ')' (the group body just ended, its quantifier decides what follows) and m_ (accept).
// Laziness is ignored because it only changes which match Python reports, never whether a full
// match exists; likewise Python's rule of not repeating a group after an empty iteration never
// changes the outcome, and the visited set keeps loops like (a*)* finite.
template <std::size_t words>
class nfa {
 public:
  static constexpr std::size_t capacity = 64 * words;  // state offsets 0 .. capacity - 1

  // Precondition: validate(pattern).ok and pattern.size() < capacity.
  constexpr explicit nfa(std::string_view pattern) noexcept
      : p_(pattern.data()), m_(pattern.size()) {
    build_links();
    // Only character atoms and the accept state matter between steps; dropping the structural
    // states from every set keeps the per-character loop short.
    set_bit(keep_, m_);
    for (std::size_t x = 0; x < m_; x = next_atom(x))
      if (is_char_atom(x)) set_bit(keep_, x);
    add(start_, 0);
    for (std::size_t y = link_[capacity]; y < m_; y = link_[y]) add(start_, y + 1);
    start_ &= keep_;
  }

  // Not const: the successor set of each atom is computed on first use, because most keys stop
  // matching a given path within a few characters and never reach most of their atoms.
  constexpr bool full_match(std::string_view text) noexcept {
    const char* const t = text.data();
    state_set current = start_;
    for (std::size_t j = 0; j < text.size(); ++j) {
      const char c = t[j];
      state_set next{};
      for (std::size_t w = 0; w < words; ++w) {
        for (std::uint64_t bits = current.w[w]; bits != 0; bits &= bits - 1) {
          const std::size_t x = 64 * w + static_cast<std::size_t>(std::countr_zero(bits));
          if (x != m_ && char_matches(p_, x, c)) next |= after(x);
        }
      }
      if (next.empty()) return false;
      current = next;
    }
    return current.test(m_);
  }

 private:
  struct state_set {
    std::uint64_t w[words];
    constexpr bool test(std::size_t i) const noexcept { return (w[i / 64] >> (i % 64) & 1) != 0; }
    constexpr bool empty() const noexcept {
      for (std::size_t k = 0; k < words; ++k)
        if (w[k] != 0) return false;
      return true;
    }
    constexpr state_set& operator|=(const state_set& o) noexcept {
      for (std::size_t k = 0; k < words; ++k) w[k] |= o.w[k];
      return *this;
    }
    constexpr state_set& operator&=(const state_set& o) noexcept {
      for (std::size_t k = 0; k < words; ++k) w[k] &= o.w[k];
      return *this;
    }
  };

  // The states reachable right after the character atom at x consumed one character.
  constexpr const state_set& after(std::size_t x) noexcept {
    state_set& s = after_[x];
    if (after_known_.test(x)) return s;
    set_bit(after_known_, x);
    s = {};
    const std::size_t ae = atom_end(x);
    if (ae < m_ && is_quantifier(p_[ae])) {
      if (p_[ae] != '?') add(s, x);
      add(s, skip(ae));
    } else {
      add(s, ae);
    }
    s &= keep_;
    return s;
  }

  static constexpr void set_bit(state_set& s, std::size_t i) noexcept {
    s.w[i / 64] |= std::uint64_t{1} << (i % 64);
  }

  constexpr bool is_char_atom(std::size_t x) const noexcept {
    return p_[x] != '(' && p_[x] != ')' && p_[x] != '|';
  }

  // Precondition: p_[x] starts a character atom.
  constexpr std::size_t atom_end(std::size_t x) const noexcept {
    return p_[x] == '[' ? link_[x] : p_[x] == '\\' ? x + 2 : x + 1;
  }

  // Steps over the syntax at x to the next offset that can be a state or an atom start.
  constexpr std::size_t next_atom(std::size_t x) const noexcept {
    switch (p_[x]) {
      case '\\':
        return x + 2;
      case '[':
        return link_[x];
      case '(':
        return p_[x + 1] == '?' ? x + 3 : x + 1;
      case '*':
      case '+':
      case '?':
        return skip(x);
      default:
        return x + 1;
    }
  }

  // The offset after the quantifier at p_[q], past its lazy '?' if any.
  constexpr std::size_t skip(std::size_t q) const noexcept {
    return q + 1 < m_ && p_[q + 1] == '?' ? q + 2 : q + 1;
  }

  // Adds x and its epsilon closure to s, depth-first with an explicit stack so that the
  // constexpr call depth stays constant. The set doubles as the visited mark.
  constexpr void add(state_set& s, std::size_t x) const noexcept {
    std::uint16_t stack[capacity];  // written before read; not zeroed, to keep evaluation cheap
    std::size_t top = 0;
    const auto push = [&](std::size_t z) {
      const std::uint64_t bit = std::uint64_t{1} << (z % 64);
      if ((s.w[z / 64] & bit) != 0) return;
      s.w[z / 64] |= bit;
      stack[top++] = static_cast<std::uint16_t>(z);
    };
    push(x);
    while (top != 0) {
      const std::size_t y = stack[--top];
      if (y == m_) continue;
      switch (p_[y]) {
        case '|': {
          std::size_t z = link_[y];
          while (z < m_ && p_[z] == '|') z = link_[z];
          push(z);
          break;
        }
        case ')': {
          const std::size_t q = y + 1;
          if (q < m_ && is_quantifier(p_[q])) {
            if (p_[q] != '?') push(link_[y]);
            push(skip(q));
          } else {
            push(q);
          }
          break;
        }
        case '(': {
          push(p_[y + 1] == '?' ? y + 3 : y + 1);
          std::size_t z = link_[y];
          for (; p_[z] == '|'; z = link_[z]) push(z + 1);
          if (z + 1 < m_ && (p_[z + 1] == '*' || p_[z + 1] == '?')) push(skip(z + 1));
          break;
        }
        default: {
          const std::size_t ae = atom_end(y);
          if (ae < m_ && (p_[ae] == '*' || p_[ae] == '?')) push(skip(ae));
        }
      }
    }
  }

  // link_ chains every group: '(' -> first '|' of its body -> next '|' -> ... -> ')', and ')'
  // points back to its '('. Slot `capacity` starts the same chain for the top level, which ends
  // at m_. For '[' it holds the offset just past the class.
  constexpr void build_links() noexcept {
    std::uint16_t open[capacity / 2 + 1]{};  // '(' offset per depth
    std::uint16_t last[capacity / 2 + 1]{};  // last chain member per depth
    std::size_t depth = 0;
    last[0] = capacity;
    for (std::size_t i = 0; i < m_;) {
      switch (p_[i]) {
        case '\\':
          i += 2;
          break;
        case '[': {
          const std::size_t e = class_end(p_, i);
          link_[i] = static_cast<std::uint16_t>(e);
          i = e;
          break;
        }
        case '(':
          ++depth;
          open[depth] = last[depth] = static_cast<std::uint16_t>(i);
          i += p_[i + 1] == '?' ? 3 : 1;
          break;
        case '|':
          link_[last[depth]] = static_cast<std::uint16_t>(i);
          last[depth] = static_cast<std::uint16_t>(i);
          ++i;
          break;
        case ')':
          link_[last[depth]] = static_cast<std::uint16_t>(i);
          link_[i] = open[depth];
          --depth;
          ++i;
          break;
        default:
          ++i;
      }
    }
    link_[last[0]] = static_cast<std::uint16_t>(m_);
  }

  const char* p_;
  std::size_t m_;
  std::uint16_t link_[capacity + 1]{};
  state_set keep_{};
  state_set start_{};
  state_set after_known_{};
  state_set after_[capacity];  // entries are written by after() before they are read
};

// full_match without the validation pass, for callers that validated the pattern once up front.
// Precondition: validate(pattern).ok.
constexpr bool full_match_unchecked(std::string_view pattern, std::string_view text) noexcept {
  if (!has_metacharacter(pattern)) return pattern == text;
  // The smallest state set that fits keeps constant evaluation cheap for typical keys.
  if (pattern.size() < 64) return nfa<1>(pattern).full_match(text);
  if (pattern.size() < 128) return nfa<2>(pattern).full_match(text);
  return nfa<4>(pattern).full_match(text);
}

}  // namespace detail

constexpr parse_result validate(std::string_view pattern) noexcept {
  const char* const p = pattern.data();
  const std::size_t n = pattern.size();
  std::size_t depth = 0;
  std::size_t outermost_open = 0;  // the '(' left unclosed when the pattern ends early
  bool can_repeat = false;         // whether the previous item is an atom a quantifier may follow
  bool literal = true;
  for (std::size_t i = 0; i < n;) {
    const char c = p[i];
    if (detail::is_metacharacter(c)) literal = false;
    switch (c) {
      case '\\': {
        if (auto r = detail::check_escape(pattern, i); !r.ok) return r;
        i += 2;
        can_repeat = true;
        break;
      }
      case '[': {
        const auto r = detail::check_class(pattern, i);
        if (!r.ok) return r;
        i = r.position;
        can_repeat = true;
        break;
      }
      case '(': {
        if (depth++ == 0) outermost_open = i;
        if (i + 1 < n && p[i + 1] == '?') {
          if (i + 2 < n && p[i + 2] == ':') {
            i += 3;
          } else if (i + 2 < n && (p[i + 2] == '=' || p[i + 2] == '!' || p[i + 2] == '<')) {
            return detail::error(i, "lookaround (?...) is not supported");
          } else {
            return detail::error(i, "group extension (?...) is not supported, only (?:...)");
          }
        } else {
          ++i;
        }
        can_repeat = false;
        break;
      }
      case ')':
        if (depth == 0) return detail::error(i, "unbalanced ')'");
        --depth;
        ++i;
        can_repeat = true;
        break;
      case '|':
        ++i;
        can_repeat = false;
        break;
      case '*':
      case '+':
      case '?':
        if (!can_repeat) return detail::error(i, "nothing to repeat");
        ++i;
        if (i < n && p[i] == '?') ++i;  // lazy form
        can_repeat = false;             // so "a**" and "a*?+" are rejected
        break;
      case '{':
        return detail::error(i, "counted repetition {m,n} is not supported");
      case '^':
      case '$':
        return detail::error(i, "anchors ^ and $ are not supported");
      default:
        ++i;
        can_repeat = true;
    }
  }
  if (depth != 0) return detail::error(outermost_open, "missing ')'");
  if (n > detail::max_pattern_size && !literal)
    return detail::error(detail::max_pattern_size,
                         "pattern too long; only literals may exceed 255");
  return {true, 0, {}};
}

// full_match when the program runs (a layout_map looked up at run time): compiled once in
// tessel::tessel (inline with headers only), not emitted by every translation unit.
TESSEL_INLINE bool full_match_at_run_time(std::string_view pattern, std::string_view text) noexcept;

// Returns false for a pattern that validate() rejects, rather than reading out of bounds.
constexpr bool full_match(std::string_view pattern, std::string_view text) noexcept {
  if (std::is_constant_evaluated())
    return validate(pattern).ok && detail::full_match_unchecked(pattern, text);
  return full_match_at_run_time(pattern, text);
}

constexpr bool is_literal(std::string_view pattern) noexcept {
  return !detail::has_metacharacter(pattern);
}

#if TESSEL_DEFINITIONS
TESSEL_INLINE bool full_match_at_run_time(std::string_view pattern,
                                          std::string_view text) noexcept {
  return validate(pattern).ok && detail::full_match_unchecked(pattern, text);
}
#endif

}  // namespace tessel::regex
