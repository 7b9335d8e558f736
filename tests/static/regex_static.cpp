// Compile-time checks for tessel::regex: every supported feature and every rejection is evaluated
// in a constant expression, the way layout_map uses it. Expected values agree with Python 3.11
// re.fullmatch.
#include <tessel/core/regex.hpp>

namespace {

using tessel::regex::full_match;
using tessel::regex::is_literal;
using tessel::regex::validate;

// The rejection is reported at `position` (not just somewhere).
constexpr bool rejected_at(std::string_view pattern, std::size_t position) {
  const auto r = validate(pattern);
  return !r.ok && r.position == position && !r.message.empty();
}

constexpr bool accepted(std::string_view pattern) {
  const auto r = validate(pattern);
  return r.ok && r.position == 0;
}

// Literals and whole-path semantics.
static_assert(full_match("dense/kernel", "dense/kernel"));
static_assert(!full_match("dense", "dense/kernel"));
static_assert(!full_match("kernel", "dense/kernel"));
static_assert(!full_match("dense/kernel", "dense/kernel2"));
static_assert(full_match("", ""));
static_assert(!full_match("", "a"));
static_assert(!full_match("a", ""));

// Dot: any character but newline.
static_assert(full_match("d./kernel", "d1/kernel"));
static_assert(full_match("...", "a/b"));
static_assert(!full_match(".", "\n"));
static_assert(!full_match(".", ""));
static_assert(!full_match("..", "a"));

// Star, plus and optional, greedy and lazy.
static_assert(full_match("ab*c", "ac"));
static_assert(full_match("ab*c", "abbbc"));
static_assert(!full_match("ab+c", "ac"));
static_assert(full_match("ab+c", "abbc"));
static_assert(full_match("ab?c", "ac"));
static_assert(full_match("ab?c", "abc"));
static_assert(!full_match("ab?c", "abbc"));
static_assert(full_match("a.*?b", "axxb"));
static_assert(full_match("a+?b", "aab"));
static_assert(full_match("a??b", "b"));
static_assert(full_match(".*", ""));
static_assert(full_match(".*bias", "dense_2/bias"));
static_assert(full_match(".*dense.*bias", "dense_2/bias"));
static_assert(!full_match(".*dense.*bias", "dense_2/kernel"));
static_assert(full_match(".*.*.*x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaax"));

// Character classes.
static_assert(full_match("dense_[0-9]+/kernel", "dense_12/kernel"));
static_assert(!full_match("dense_[0-9]+/kernel", "dense_/kernel"));
static_assert(full_match("[abc]+", "cab"));
static_assert(!full_match("[abc]", "d"));
static_assert(full_match("[a-z0-9_]+", "dense_2"));
static_assert(!full_match("[a-z0-9_]+", "dense/2"));
static_assert(full_match("[^/]+/kernel", "dense_1/kernel"));
static_assert(!full_match("[^/]+/kernel", "a/b/kernel"));
static_assert(full_match("[]a]", "]"));   // ']' first is literal
static_assert(full_match("[^]a]", "b"));  // also after '^'
static_assert(!full_match("[^]a]", "]"));
static_assert(full_match("[a-]", "-"));  // '-' last is literal
static_assert(full_match("[-a]", "-"));  // '-' first is literal
static_assert(full_match("[a^]", "^"));  // '^' not first is literal
static_assert(full_match(R"([\]\-\\])", "]"));
static_assert(full_match(R"([\]\-\\])", "-"));
static_assert(full_match(R"([\]\-\\])", "\\"));
static_assert(full_match(R"([\d_]+)", "1_2"));
static_assert(full_match(R"([^\d]+)", "abc"));
static_assert(!full_match(R"([^\d]+)", "a1"));
static_assert(full_match(R"([\w/]+)", "dense_1/kernel"));
static_assert(full_match(R"([\s]+)", " \t\n"));
static_assert(full_match(R"([!-/]+)", "!/+"));  // range between punctuation
static_assert(full_match("[.]", "."));
static_assert(!full_match("[.]", "a"));

// Escapes.
static_assert(full_match(R"(\d+)", "0123456789"));
static_assert(!full_match(R"(\d)", "a"));
static_assert(full_match(R"(\D)", "a"));
static_assert(full_match(R"(\w+)", "Dense_2"));
static_assert(!full_match(R"(\w)", "/"));
static_assert(full_match(R"(\W)", "/"));
static_assert(full_match(R"(\s\S)", " a"));
static_assert(full_match(R"(\s)", "\x1c"));  // as Python str patterns (str.isspace)
static_assert(!full_match(R"(\S)", "\t"));
static_assert(full_match(R"(a\.b)", "a.b"));
static_assert(!full_match(R"(a\.b)", "axb"));
static_assert(full_match(R"(\\\/\*\+\?\(\)\[\]\|\-\{\})", R"(\/*+?()[]|-{})"));
static_assert(full_match(R"(a\ b\#)", "a b#"));
static_assert(full_match("a]b}c-d", "a]b}c-d"));  // ']' '}' '-' are literal outside classes

// Alternation and groups.
static_assert(full_match("(d1|d2)/bias", "d2/bias"));
static_assert(!full_match("(d1|d2)/bias", "d3/bias"));
static_assert(full_match("d1/kernel|d2/output", "d2/output"));
static_assert(!full_match("d1/kernel|d2/output", "d1/output"));
static_assert(full_match("a|", ""));
static_assert(full_match("|a", "a"));
static_assert(full_match("(|x)y", "y"));
static_assert(full_match("()", ""));
static_assert(full_match("(?:a|b)+c", "abbac"));
static_assert(full_match(R"(conv2d(_\d+)?/kernel)", "conv2d/kernel"));
static_assert(full_match(R"(conv2d(_\d+)?/kernel)", "conv2d_3/kernel"));
static_assert(!full_match(R"(conv2d(_\d+)?/kernel)", "conv2d_/kernel"));
static_assert(full_match("((a|b)(c|d))+", "acbdad"));
static_assert(!full_match("((a|b)(c|d))+", "acb"));
static_assert(full_match("(?:(?:a|b)c)*", ""));

// Backtracking through loops, and loops whose body can match empty.
static_assert(full_match("(ab|a)*b", "abab"));
static_assert(full_match("(ab|a)*b", "aab"));
static_assert(!full_match("(ab|a)*b", "abba"));
static_assert(full_match("(a|ab)(c|bcd)(d*)", "abcd"));
static_assert(full_match("([^/]+/)*kernel", "a/b/c/kernel"));
static_assert(full_match("(a*)*", ""));
static_assert(full_match("(a*)*b", "aaab"));
static_assert(!full_match("(a*)*b", "aaac"));
static_assert(full_match("(a*)+", ""));
static_assert(full_match("(a?b?)*c", "abbac"));
static_assert(full_match("()*x", "x"));
static_assert(full_match("(|a)+", "aaa"));
static_assert(!full_match("(a|aa)*c",
                          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));

// 64-character paths through looped groups stay within gcc's constexpr depth and op limits.
static_assert(full_match("(ab|a)*",
                         "abababababababababababababababababababababababababababababababab"));
static_assert(full_match("((a|b)+)*",
                         "abababababababababababababababababababababababababababababababab"));
static_assert(!full_match("(a|ab|b)*c",
                          "abababababababababababababababababababababababababababababababab"));

// Patterns of 64..255 characters use wider state sets.
static_assert(
    full_match("(layer_[0-9]+/)?(attention|mlp|norm)/(query|key|value|output)/(kernel|bias)|"
               ".*embedding.*",
               "layer_3/attention/value/bias"));
static_assert(
    full_match("(?:aaaaaaaaaa|bbbbbbbbbb|cccccccccc|dddddddddd|eeeeeeeeee|ffffffffff|gggggggggg|"
               "hhhhhhhhhh|iiiiiiiiii|jjjjjjjjjj|kkkkkkkkkk|llllllllll)+",
               "llllllllllaaaaaaaaaa"));

// is_literal.
static_assert(is_literal("dense/kernel"));
static_assert(is_literal("dense_2/bias"));
static_assert(is_literal(""));
static_assert(!is_literal("dense.kernel"));
static_assert(!is_literal(".*bias"));
static_assert(!is_literal("[^/]"));
static_assert(!is_literal(R"(a\.b)"));
static_assert(!is_literal("a|b"));

// Accepted patterns report position 0.
static_assert(accepted(""));
static_assert(accepted("dense/kernel"));
static_assert(accepted(R"(conv2d(_\d+)?/kernel)"));
static_assert(accepted("(?:a|b)*?c"));
static_assert(accepted("[]]"));

// Rejections, with the offending offset.
static_assert(rejected_at("a{2}", 1));  // counted repetition
static_assert(rejected_at("dense_[0-9]{1,3}", 11));
static_assert(rejected_at("(.*a){20}x", 5));
static_assert(rejected_at("^dense", 0));  // anchors
static_assert(rejected_at("dense$", 5));
static_assert(rejected_at(R"(a(b)\1)", 4));  // backreference
static_assert(rejected_at("(?=a)a", 0));     // lookaround
static_assert(rejected_at("a(?!b)", 1));
static_assert(rejected_at("(?<=a)b", 0));
static_assert(rejected_at("(?P<n>a)", 0));  // other extensions
static_assert(rejected_at("(?i)a", 0));
static_assert(rejected_at("a)", 1));  // unbalanced parentheses
static_assert(rejected_at("(a))", 3));
static_assert(rejected_at("x(a", 1));
static_assert(rejected_at("((a)", 0));
static_assert(rejected_at("a[bc", 1));  // unterminated class
static_assert(rejected_at("[]", 0));
static_assert(rejected_at("[^]", 0));
static_assert(rejected_at("*a", 0));  // nothing to repeat
static_assert(rejected_at("a**", 2));
static_assert(rejected_at("a*?*", 3));
static_assert(rejected_at("a*+", 2));  // possessive (Python 3.11+)
static_assert(rejected_at("(*a)", 1));
static_assert(rejected_at("a|?", 2));
static_assert(rejected_at("(?:+)", 3));
static_assert(rejected_at("ab\\", 2));  // dangling backslash
static_assert(rejected_at("[a\\", 2));
static_assert(rejected_at(R"(\bdense)", 0));  // unsupported escapes
static_assert(rejected_at(R"(a\z)", 1));
static_assert(rejected_at(R"(\n)", 0));
static_assert(rejected_at(R"([\b])", 1));
static_assert(rejected_at(R"(\0)", 0));
static_assert(rejected_at("[z-a]", 1));  // bad ranges
static_assert(rejected_at(R"([\d-z])", 1));

// full_match refuses invalid patterns instead of reading out of bounds.
static_assert(!full_match("(a", "a"));
static_assert(!full_match("[a", "[a"));

}  // namespace

// Gives the object file a symbol; the checks above are the content.
int tessel_regex_static_checks() { return 0; }
