// Run-time tests for tessel::regex. The expected column of the match table was computed with
// Python 3.11 re.fullmatch, the semantics Keras's LayoutMap uses for its keys.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <tessel/core/regex.hpp>

namespace {

struct match_case {
  std::string_view pattern;
  std::string_view path;
  bool expected;
};

// Runtime copies, so that the checks below run the matcher at run time even though it is
// constexpr.
bool run_full_match(std::string_view pattern, std::string_view path) {
  const std::string p(pattern);
  const std::string t(path);
  return tessel::regex::full_match(p, t);
}

constexpr match_case match_cases[] = {
    {"dense/kernel", "dense/kernel", true},
    {"dense/kernel", "dense_2/bias", false},
    {".*dense.*bias", "dense_2/bias", true},
    {".*bias", "dense_2/bias", true},
    {".*dense.*bias", "dense/kernel", false},
    {".*bias", "dense/kernel", false},
    {"d1/kernel", "d1/kernel", true},
    {"d1/kernel", "d1/kernel_1", false},
    {"d2/output", "d2/output", true},
    {"d2/output", "d1/output", false},
    {".*kernel", "d1/kernel", true},
    {".*kernel", "d1/kernel/moment", false},
    {".*kernel", "kernel", true},
    {"dense", "dense/kernel", false},
    {"kernel", "dense/kernel", false},
    {"dense_[0-9]+/kernel", "dense_12/kernel", true},
    {"dense_[0-9]+/kernel", "dense_/kernel", false},
    {"dense_[0-9]+/kernel", "dense_1a/kernel", false},
    {R"(conv2d(_\d+)?/kernel)", "conv2d/kernel", true},
    {R"(conv2d(_\d+)?/kernel)", "conv2d_7/kernel", true},
    {R"(conv2d(_\d+)?/kernel)", "conv2d_/kernel", false},
    {R"(conv2d(_\d+)?/kernel)", "conv2d_1_2/kernel", false},
    {"(d1|d2)/bias", "d1/bias", true},
    {"(d1|d2)/bias", "d2/bias", true},
    {"(d1|d2)/bias", "d3/bias", false},
    {"(d1|d2)/bias", "d1/d2/bias", false},
    {"[^/]+/kernel", "dense_3/kernel", true},
    {"[^/]+/kernel", "block/dense/kernel", false},
    {"[^/]+/kernel", "/kernel", false},
    {"([^/]+/)*kernel", "block/dense/kernel", true},
    {"([^/]+/)*kernel", "kernel", true},
    {R"((?:encoder|decoder)/layer_\d+/(query|key|value)/kernel)", "encoder/layer_11/value/kernel",
     true},
    {R"((?:encoder|decoder)/layer_\d+/(query|key|value)/kernel)", "decoder/layer_0/output/kernel",
     false},
    {".*/attention/.*", "transformer/layer_0/attention/query/bias", true},
    {".*/attention/.*", "attention/query", false},
    {"model/.*_norm/(gamma|beta)", "model/layer_norm/gamma", true},
    {"model/.*_norm/(gamma|beta)", "model/layer_norm/moving_mean", false},
    {R"((\w+/)+bias)", "a/b_c/bias", true},
    {R"((\w+/)+bias)", "a-b/bias", false},
    {R"(embedding\.weight)", "embedding.weight", true},
    {R"(embedding\.weight)", "embeddingxweight", false},
    {"embedding.weight", "embeddingxweight", true},
    {R"([\w.-]+/kernel)", "dense-1.v2/kernel", true},
    {R"(\S+\s\S+)", "a b", true},
    {R"(\D+\d)", "dense1", true},
    {R"(\W)", "/", true},
    {"a|b|c", "b", true},
    {"a|b|c", "ab", false},
    {"(a|b|c)+", "abcab", true},
    {"x(|y)z", "xz", true},
    {"(ab|a)*b", "abab", true},
    {"(ab|a)*b", "aab", true},
    {"(ab|a)*b", "abba", false},
    {"(a*)*b", "aaab", true},
    {"(a*)*b", "aaa", false},
    {"(a*)+", "", true},
    {"a.c", "a\nc", false},
    {".*", "dense/kernel", true},
    {".*?/kernel", "x/kernel", true},
    {"ab+?", "abbb", true},
    {"colou?r", "color", true},
    {"colou?r", "colouur", false},
    {"[a-c-e]+", "a-e", true},
    {"[]x]+", "]x]", true},
    {"[^]x]+", "ab", true},
    {R"([\]\\-]+)", R"(]\-)", true},
    {"[z-]", "-", true},
    {"", "", true},
    {"", "x", false},
};

struct rejection_case {
  std::string_view pattern;
  std::size_t position;
};

constexpr rejection_case rejection_cases[] = {
    {"a{2}", 1},
    {"dense_[0-9]{1,3}/kernel", 11},
    {"}{", 1},
    {"^dense/kernel", 0},
    {".*bias$", 6},
    {R"((a)\1)", 3},
    {R"(a\9)", 1},
    {"(?=d)dense", 0},
    {"(?!d)x", 0},
    {"x(?<!d)", 1},
    {"(?P<name>a)", 0},
    {"(?i)dense", 0},
    {"(?", 0},
    {"dense)", 5},
    {"(d1|d2))/bias", 7},
    {"(d1|d2/bias", 0},
    {"a((b)", 1},
    {"[a-z", 0},
    {"dense_[0-9", 6},
    {"[]", 0},
    {"*kernel", 0},
    {"+", 0},
    {"?", 0},
    {"a**", 2},
    {"a+?+", 3},
    {"(|*)", 2},
    {"(?:*)", 3},
    {"a||?", 3},
    {"kernel\\", 6},
    {"[\\", 1},
    {R"(\bdense)", 0},
    {R"(dense\z)", 5},
    {R"(\A)", 0},
    {R"(\t)", 0},
    {R"([\n])", 1},
    {"[9-0]", 1},
    {R"([a-\w])", 1},
};

}  // namespace

TEST_CASE("full_match agrees with Python re.fullmatch", "[regex]") {
  STATIC_REQUIRE(std::size(match_cases) >= 40);
  for (const auto& c : match_cases) {
    INFO("pattern '" << c.pattern << "' path '" << c.path << "'");
    REQUIRE(tessel::regex::validate(c.pattern).ok);
    CHECK(run_full_match(c.pattern, c.path) == c.expected);
  }
}

TEST_CASE("Keras LayoutMap keys: dense_2/bias matches two of three regex keys", "[regex]") {
  constexpr std::array<std::string_view, 3> keys = {"dense/kernel", ".*dense.*bias", ".*bias"};
  int matches = 0;
  for (const auto key : keys) matches += run_full_match(key, "dense_2/bias") ? 1 : 0;
  CHECK(matches == 2);
  CHECK(run_full_match(keys[0], "dense/kernel"));
  CHECK(tessel::regex::is_literal(keys[0]));
  CHECK_FALSE(tessel::regex::is_literal(keys[1]));
}

TEST_CASE("full_match gives the same answers in constant expressions", "[regex]") {
  STATIC_REQUIRE(tessel::regex::full_match(".*dense.*bias", "dense_2/bias"));
  STATIC_REQUIRE(tessel::regex::full_match(R"(conv2d(_\d+)?/kernel)", "conv2d_3/kernel"));
  STATIC_REQUIRE_FALSE(tessel::regex::full_match("dense", "dense/kernel"));
  STATIC_REQUIRE(tessel::regex::full_match("(ab|a)*b", "aab"));
}

TEST_CASE("validate rejects unsupported syntax at the offending offset", "[regex]") {
  for (const auto& c : rejection_cases) {
    INFO("pattern '" << c.pattern << "'");
    const auto r = tessel::regex::validate(c.pattern);
    CHECK_FALSE(r.ok);
    CHECK(r.position == c.position);
    CHECK_FALSE(r.message.empty());
    // An invalid pattern never matches, even itself.
    CHECK_FALSE(run_full_match(c.pattern, c.pattern));
  }
}

TEST_CASE("validate names the reason", "[regex]") {
  using tessel::regex::validate;
  CHECK(validate("a{1,2}").message == "counted repetition {m,n} is not supported");
  CHECK(validate("a)").message == "unbalanced ')'");
  CHECK(validate("[a").message == "unterminated [...] class");
  CHECK(validate("*").message == "nothing to repeat");
  CHECK(validate(R"((a)\1)").message == "backreferences are not supported");
  CHECK(validate("^a").message == "anchors ^ and $ are not supported");
  CHECK(validate("(?=a)").message == "lookaround (?...) is not supported");
  CHECK(validate("a\\").message == "dangling backslash");
  const auto ok = validate(".*bias");
  CHECK(ok.ok);
  CHECK(ok.position == 0);
  CHECK(ok.message.empty());
}

TEST_CASE("long patterns", "[regex]") {
  // Longer regexes than this need wider NFA state sets than the engine carries.
  const std::string long_regex = std::string(300, 'a') + ".*";
  const auto r = tessel::regex::validate(long_regex);
  CHECK_FALSE(r.ok);
  CHECK(r.position == 255);
  // Literal keys have no such limit: they are compared as strings.
  const std::string long_literal = std::string(300, 'a') + "/kernel";
  CHECK(tessel::regex::validate(long_literal).ok);
  CHECK(run_full_match(long_literal, long_literal));
  CHECK_FALSE(run_full_match(long_literal, long_literal + "s"));
  // 64..255 characters: wider state sets, same semantics.
  std::string alternatives;
  for (char c = 'a'; c <= 'z'; ++c) alternatives += std::string(1, c) + "x|";
  alternatives += "zz";
  const std::string wide = "(" + alternatives + ")+/kernel";
  REQUIRE(wide.size() > 64);
  REQUIRE(tessel::regex::validate(wide).ok);
  CHECK(run_full_match(wide, "axbxzz/kernel"));
  CHECK_FALSE(run_full_match(wide, "axbyzz/kernel"));
}

TEST_CASE("catastrophic backtracking patterns stay linear", "[regex]") {
  // Python needs exponential time for these; the NFA does not backtrack.
  const std::string as(200, 'a');
  CHECK_FALSE(run_full_match("(a|aa)*c", as));
  CHECK_FALSE(run_full_match("(a*)*c", as));
  CHECK(run_full_match("(a|aa)*", as));
}
