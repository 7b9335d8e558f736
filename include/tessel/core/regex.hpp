// Constexpr regular-expression subset with Python re.fullmatch semantics, for layout_map keys.
#pragma once

#include <cstddef>
#include <string_view>

namespace tessel::regex {

struct parse_result {
  bool ok;                   // true when the pattern is within the supported subset
  std::size_t position;      // offset in the pattern of the first offending character (0 when ok)
  std::string_view message;  // short reason; empty when ok
};

namespace detail {

// Character predicates use ASCII semantics: the engine works on bytes, and layout paths are
// ASCII. Bytes >= 0x80 are never digits, word or space characters.
constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
constexpr bool is_alpha(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
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
    case 'd': return is_digit(c);
    case 'D': return !is_digit(c);
    case 'w': return is_word(c);
    case 'W': return !is_word(c);
    case 's': return is_space(c);
    default: return !is_space(c);
  }
}

constexpr bool is_quantifier(char c) noexcept { return c == '*' || c == '+' || c == '?'; }

constexpr parse_result error(std::size_t position, std::string_view message) noexcept {
  return {false, position, message};
}

// Diagnoses the escape at p[i] == '\\'; shared by the top level and [...] classes so that both
// accept exactly the same escapes.
constexpr parse_result check_escape(std::string_view p, std::size_t i) noexcept {
  if (i + 1 >= p.size()) return error(i, "dangling backslash");
  const char e = p[i + 1];
  if (e >= '1' && e <= '9') return error(i, "backreferences are not supported");
  if ((is_alpha(e) && !is_set_escape(e)) || e == '0') return error(i, "unsupported escape");
  return {true, 0, {}};
}

// Validates the class whose '[' is at p[i]; on success `position` is the offset just past ']'.
// Mirrors Python: a ']' right after '[' or '[^' is literal, and '-' first or last is literal.
constexpr parse_result check_class(std::string_view p, std::size_t i) noexcept {
  const std::size_t n = p.size();
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
      if (auto r = check_escape(p, j); !r.ok) return r;
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
        if (auto r = check_escape(p, j); !r.ok) return r;
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
constexpr std::size_t class_end(std::string_view p, std::size_t i) noexcept {
  std::size_t j = i + 1;
  if (p[j] == '^') ++j;
  if (p[j] == ']') ++j;
  while (p[j] != ']') j += p[j] == '\\' ? 2 : 1;
  return j + 1;
}

// Offset just past the ')' matching the '(' at p[i].
constexpr std::size_t group_end(std::string_view p, std::size_t i) noexcept {
  std::size_t depth = 0;
  for (std::size_t j = i;;) {
    switch (p[j]) {
      case '\\': j += 2; break;
      case '[': j = class_end(p, j); break;
      case '(': ++depth, ++j; break;
      case ')':
        ++j;
        if (--depth == 0) return j;
        break;
      default: ++j;
    }
  }
}

// Offset just past the atom starting at p[i]; quantifiers and '|' count as one-character atoms,
// which lets callers step through a region atom by atom.
constexpr std::size_t atom_end(std::string_view p, std::size_t i) noexcept {
  switch (p[i]) {
    case '\\': return i + 2;
    case '[': return class_end(p, i);
    case '(': return group_end(p, i);
    default: return i + 1;
  }
}

// Whether the class opened at p[i] matches c.
constexpr bool class_matches(std::string_view p, std::size_t i, char c) noexcept {
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
constexpr bool char_matches(std::string_view p, std::size_t i, char c) noexcept {
  switch (p[i]) {
    case '.': return c != '\n';
    case '[': return class_matches(p, i, c);
    case '\\': return is_set_escape(p[i + 1]) ? set_escape_matches(p[i + 1], c) : c == p[i + 1];
    default: return c == p[i];
  }
}

// What remains to be matched once the current region succeeds. Continuations live on the C++
// stack of the caller and are chained by pointer, so backtracking needs neither heap nor
// templates; a null continuation means "the text must end here" (fullmatch).
struct continuation {
  enum class kind : unsigned char { sequence, loop };
  kind what;
  std::size_t begin;  // sequence: region still to match; loop: the group body
  std::size_t end;
  std::size_t start;  // loop: text offset where the iteration that just ended began
  bool lazy;          // loop: prefer leaving the loop over another iteration
  const continuation* next;  // loop: what follows the quantified group
};

struct matcher {
  std::string_view p;
  std::string_view t;

  constexpr bool resume(const continuation* k, std::size_t j) const noexcept {
    if (k == nullptr) return j == t.size();
    if (k->what == continuation::kind::sequence) return match_sequence(k->begin, k->end, j, k->next);
    // Python stops repeating after an iteration that consumed nothing; this also keeps loops
    // like (a*)* finite, because every further iteration must advance j.
    if (j == k->start) return resume(k->next, j);
    return repeat(*k, j);
  }

  // Offers one more iteration of the group body in `loop`, in the order its greediness asks.
  constexpr bool repeat(const continuation& loop, std::size_t j) const noexcept {
    const continuation again{continuation::kind::loop, loop.begin, loop.end, j, loop.lazy,
                             loop.next};
    if (loop.lazy) return resume(loop.next, j) || match_alternatives(loop.begin, loop.end, j, &again);
    return match_alternatives(loop.begin, loop.end, j, &again) || resume(loop.next, j);
  }

  // Matches the region [b, e), which may contain top-level '|', then k.
  constexpr bool match_alternatives(std::size_t b, std::size_t e, std::size_t j,
                                    const continuation* k) const noexcept {
    for (std::size_t i = b; i < e; i = atom_end(p, i)) {
      if (p[i] == '|') {
        if (match_sequence(b, i, j, k)) return true;
        b = i + 1;
      }
    }
    return match_sequence(b, e, j, k);
  }

  // Matches the '|'-free region [i, e), then k. Unquantified characters are consumed in a loop
  // rather than by recursion to keep the constexpr call depth proportional to the number of
  // choice points, not to the length of the pattern.
  constexpr bool match_sequence(std::size_t i, std::size_t e, std::size_t j,
                                const continuation* k) const noexcept {
    while (i < e) {
      const std::size_t ae = atom_end(p, i);
      const char q = ae < e ? p[ae] : '\0';
      if (!is_quantifier(q)) {
        if (p[i] == '(') {
          const continuation tail{continuation::kind::sequence, ae, e, 0, false, k};
          return match_alternatives(group_body(i), ae - 1, j, &tail);
        }
        if (j >= t.size() || !char_matches(p, i, t[j])) return false;
        ++j;
        i = ae;
        continue;
      }
      std::size_t next = ae + 1;
      const bool lazy = next < e && p[next] == '?';
      if (lazy) ++next;
      if (p[i] == '(') return match_quantified_group(i, ae, q, lazy, next, e, j, k);

      // A quantified single character: find how far it can reach, then try each count, so no
      // recursion is spent per repetition.
      const std::size_t room = t.size() - j;
      const std::size_t limit = q == '?' && room > 1 ? 1 : room;
      std::size_t most = 0;
      while (most < limit && char_matches(p, i, t[j + most])) ++most;
      const std::size_t least = q == '+' ? 1 : 0;
      if (most < least) return false;
      if (lazy) {
        for (std::size_t c = least; c <= most; ++c)
          if (match_sequence(next, e, j + c, k)) return true;
      } else {
        for (std::size_t c = most + 1; c-- > least;)
          if (match_sequence(next, e, j + c, k)) return true;
      }
      return false;
    }
    return resume(k, j);
  }

  constexpr std::size_t group_body(std::size_t i) const noexcept {
    return p[i + 1] == '?' ? i + 3 : i + 1;  // skip "(?:"
  }

  // The group [i, ae) followed by quantifier q; the rest of the sequence is [next, e).
  constexpr bool match_quantified_group(std::size_t i, std::size_t ae, char q, bool lazy,
                                        std::size_t next, std::size_t e, std::size_t j,
                                        const continuation* k) const noexcept {
    const continuation tail{continuation::kind::sequence, next, e, 0, false, k};
    const std::size_t body = group_body(i);
    if (q == '?') {
      if (lazy) return resume(&tail, j) || match_alternatives(body, ae - 1, j, &tail);
      return match_alternatives(body, ae - 1, j, &tail) || resume(&tail, j);
    }
    const continuation loop{continuation::kind::loop, body, ae - 1, j, lazy, &tail};
    // '+' owes one iteration before the tail may be tried.
    if (q == '+') return match_alternatives(body, ae - 1, j, &loop);
    return repeat(loop, j);
  }
};

// full_match without the validation pass, for callers that validated the pattern once up front.
// Precondition: validate(pattern).ok.
constexpr bool full_match_unchecked(std::string_view pattern, std::string_view text) noexcept {
  return matcher{pattern, text}.match_alternatives(0, pattern.size(), 0, nullptr);
}

}  // namespace detail

constexpr parse_result validate(std::string_view pattern) noexcept {
  const std::string_view p = pattern;
  const std::size_t n = p.size();
  std::size_t depth = 0;
  std::size_t outermost_open = 0;  // the '(' left unclosed when the pattern ends early
  bool can_repeat = false;         // whether the previous item is an atom a quantifier may follow
  for (std::size_t i = 0; i < n;) {
    const char c = p[i];
    switch (c) {
      case '\\': {
        if (auto r = detail::check_escape(p, i); !r.ok) return r;
        i += 2;
        can_repeat = true;
        break;
      }
      case '[': {
        const auto r = detail::check_class(p, i);
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
      case '{': return detail::error(i, "counted repetition {m,n} is not supported");
      case '^':
      case '$': return detail::error(i, "anchors ^ and $ are not supported");
      default:
        ++i;
        can_repeat = true;
    }
  }
  if (depth != 0) return detail::error(outermost_open, "missing ')'");
  return {true, 0, {}};
}

// Returns false for a pattern that validate() rejects, rather than reading out of bounds.
constexpr bool full_match(std::string_view pattern, std::string_view text) noexcept {
  return validate(pattern).ok && detail::full_match_unchecked(pattern, text);
}

constexpr bool is_literal(std::string_view pattern) noexcept {
  // Conservative: ']' and '}' are literal outside a class in Python but read like syntax.
  return pattern.find_first_of("\\.^$*+?()[]{}|") == std::string_view::npos;
}

}  // namespace tessel::regex
