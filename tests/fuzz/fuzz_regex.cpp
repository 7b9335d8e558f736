// libFuzzer harness for tessel::regex (include/tessel/core/regex.hpp), the parser and matcher of
// layout_map keys (Python re.fullmatch semantics on a subset). Keys are compile-time strings in
// normal use, but the functions are constexpr and run the same code at run time, where the
// sanitizers can watch it; undefined behaviour here would be a compile error (or worse, a wrong
// lookup) in a user's program.
//
// Input: the pattern, a 0 byte, the text. Without a 0 byte the input is both the pattern and the
// text. Pattern and text are copied into exactly-sized heap buffers, so that a read past either
// end is an AddressSanitizer report.
//
// Checked besides memory safety:
// - validate: ok comes with position 0 and no message; a rejection with a message and a position
//   inside the pattern; a rejected pattern matches nothing; a literal pattern is accepted and
//   matches exactly itself.
// - full_match against a reference matcher written here (sets of text positions over a parse
//   tree, no NFA), for texts up to 512 bytes, sharing only the single-character tests with the
//   library; and the NFA with 1, 2 and 4 words of states agree where the pattern fits.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <tessel/core/regex.hpp>
#include <vector>

#include "fuzz_support.hpp"

namespace rx = tessel::regex;
using tessel_fuzz::fail;

namespace {

// A reference matcher for validated patterns: a parse tree, then the set of text positions
// reachable after each part (so alternation, groups and the quantifiers are modelled directly,
// with no state machine). Laziness does not change whether a full match exists.
class reference {
 public:
  explicit reference(std::string_view pattern) : p_(pattern.data()), n_(pattern.size()) {
    std::size_t i = 0;
    parse_alternatives(i);
    if (i != n_) fail("reference parser: a validated pattern has an unmatched ')'");
  }

  bool full_match(std::string_view text) const {
    t_ = text;
    positions start(text.size() + 1, 0);
    start[0] = 1;
    return run_group(0, start)[text.size()] != 0;
  }

 private:
  using positions = std::vector<char>;  // positions[j]: the text's first j characters consumed
  struct item {
    bool is_group = false;
    std::size_t atom = 0;  // the atom's offset in the pattern (literal, '.', escape, class)
    std::size_t group = 0;
    char quantifier = 0;  // 0, '*', '+' or '?'
  };
  using branch = std::vector<item>;
  struct group {
    std::vector<branch> branches;
  };

  std::size_t parse_alternatives(std::size_t& i) {
    const std::size_t g = groups_.size();
    groups_.push_back({});
    groups_[g].branches.emplace_back();
    while (i < n_ && p_[i] != ')') {
      if (p_[i] == '|') {
        groups_[g].branches.emplace_back();
        ++i;
        continue;
      }
      item it;
      if (p_[i] == '(') {
        i += (i + 1 < n_ && p_[i + 1] == '?') ? 3 : 1;  // "(?:" or "("
        it.is_group = true;
        it.group = parse_alternatives(i);
        if (i >= n_) fail("reference parser: a validated pattern has an unclosed '('");
        ++i;  // ')'
      } else if (p_[i] == '[') {
        it.atom = i;
        i = rx::detail::class_end(p_, i);
      } else {
        it.atom = i;
        i += p_[i] == '\\' ? 2 : 1;
      }
      if (i < n_ && (p_[i] == '*' || p_[i] == '+' || p_[i] == '?')) {
        it.quantifier = p_[i++];
        if (i < n_ && p_[i] == '?') ++i;  // lazy
      }
      groups_[g].branches.back().push_back(it);
    }
    return g;
  }

  positions run_group(std::size_t g, const positions& from) const {
    positions out(from.size(), 0);
    for (const branch& b : groups_[g].branches) {
      positions cur = from;
      for (const item& it : b) cur = run_item(it, cur);
      for (std::size_t j = 0; j < out.size(); ++j) out[j] |= cur[j];
    }
    return out;
  }

  positions run_once(const item& it, const positions& from) const {
    if (it.is_group) return run_group(it.group, from);
    positions out(from.size(), 0);
    for (std::size_t j = 0; j + 1 < from.size(); ++j)
      if (from[j] && rx::detail::char_matches(p_, it.atom, t_[j])) out[j + 1] = 1;
    return out;
  }

  // Zero or more repetitions: grow the set until no new position is reached.
  positions closure(const item& it, const positions& from) const {
    positions all = from;
    positions frontier = from;
    for (;;) {
      const positions next = run_once(it, frontier);
      bool grew = false;
      for (std::size_t j = 0; j < all.size(); ++j) {
        frontier[j] = next[j] && !all[j];
        if (frontier[j]) all[j] = 1, grew = true;
      }
      if (!grew) return all;
    }
  }

  positions run_item(const item& it, const positions& from) const {
    switch (it.quantifier) {
      case '*':
        return closure(it, from);
      case '+':
        return closure(it, run_once(it, from));
      case '?': {
        positions out = run_once(it, from);
        for (std::size_t j = 0; j < out.size(); ++j) out[j] |= from[j];
        return out;
      }
      default:
        return run_once(it, from);
    }
  }

  const char* p_;
  std::size_t n_;
  std::vector<group> groups_;
  mutable std::string_view t_;
};

template <std::size_t Words>
bool nfa_match(std::string_view pattern, std::string_view text) {
  auto m = std::make_unique<rx::detail::nfa<Words>>(pattern);
  return m->full_match(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* begin = reinterpret_cast<const char*>(data);
  const void* zero = std::memchr(begin, 0, size);
  const std::size_t pattern_size = zero ? static_cast<const char*>(zero) - begin : size;
  const char* text_begin = zero ? begin + pattern_size + 1 : begin;
  const std::size_t text_size = zero ? size - pattern_size - 1 : size;

  // Exactly-sized copies (new char[0] for an empty one), so that ASan sees any overread.
  std::unique_ptr<char[]> pattern_buf(new char[pattern_size]);
  std::unique_ptr<char[]> text_buf(new char[text_size]);
  if (pattern_size) std::memcpy(pattern_buf.get(), begin, pattern_size);
  if (text_size) std::memcpy(text_buf.get(), text_begin, text_size);
  const std::string_view pattern(pattern_buf.get(), pattern_size);
  const std::string_view text(text_buf.get(), text_size);

  const rx::parse_result v = rx::validate(pattern);
  const bool matched = rx::full_match(pattern, text);
  if (v.ok) {
    if (v.position != 0 || !v.message.empty()) fail("validate: ok with a position or a message");
  } else {
    if (v.message.empty()) fail("validate: a rejection without a message");
    if (v.position >= pattern.size()) fail("validate: a rejection at a position past the pattern");
    if (matched) fail("full_match: a rejected pattern matched");
  }
  if (rx::is_literal(pattern)) {
    if (!v.ok) fail("validate: a literal pattern was rejected");
    if (matched != (pattern == text)) fail("full_match: a literal pattern matched another text");
  }
  if (!v.ok || rx::is_literal(pattern)) return 0;

  if (text.size() <= 512 && matched != reference(pattern).full_match(text))
    fail("full_match disagrees with the reference matcher");
  if (pattern.size() < 64 && (nfa_match<2>(pattern, text) != matched ||
                              nfa_match<4>(pattern, text) != matched))
    fail("the NFA gives different answers with 1, 2 and 4 words of states");
  if (pattern.size() < 128 && nfa_match<4>(pattern, text) != matched)
    fail("the NFA gives different answers with 2 and 4 words of states");
  return 0;
}
