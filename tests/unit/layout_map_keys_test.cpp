// layout_map keys as regular expressions: tessel's matcher against Python's re.fullmatch, and the
// Keras LayoutMap lookup rules on top of it. The expected column was computed with Python 3.11's
// re.fullmatch.
#include <catch2/catch.hpp>
#include <string_view>
#include <tessel/core.hpp>

namespace {
struct row {
  std::string_view pattern, path;
  bool expected;
};
constexpr row rows[] = {
    {R"(dense/kernel)", "dense/kernel", true},
    {R"(dense/kernel)", "dense/kernel2", false},
    {R"(dense)", "dense/kernel", false},
    {R"(.*dense.*bias)", "dense_2/bias", true},
    {R"(.*bias)", "dense_2/bias", true},
    {R"(.*dense.*bias)", "conv/bias", false},
    {R"(.*kernel)", "d1/kernel", true},
    {R"(.*kernel)", "d1/kernel/x", false},
    {R"(d1/kernel)", "d1/kernel", true},
    {R"(d2/output)", "d2/output", true},
    {R"(dense_[0-9]+/kernel)", "dense_12/kernel", true},
    {R"(dense_[0-9]+/kernel)", "dense_/kernel", false},
    {R"(dense_[0-9]+/kernel)", "dense_a/kernel", false},
    {R"(conv2d(_\d+)?/kernel)", "conv2d/kernel", true},
    {R"(conv2d(_\d+)?/kernel)", "conv2d_3/kernel", true},
    {R"(conv2d(_\d+)?/kernel)", "conv2d_x/kernel", false},
    {R"((d1|d2)/bias)", "d1/bias", true},
    {R"((d1|d2)/bias)", "d2/bias", true},
    {R"((d1|d2)/bias)", "d3/bias", false},
    {R"([^/]+/kernel)", "dense/kernel", true},
    {R"([^/]+/kernel)", "a/b/kernel", false},
    {R"(\w+/\w+)", "dense_1/kernel", true},
    {R"(\w+/\w+)", "dense-1/kernel", false},
    {R"(d\d/(kernel|bias))", "d7/bias", true},
    {R"((ab|a)*b)", "abab", true},
    {R"((ab|a)*b)", "aab", true},
    {R"((ab|a)*b)", "abb", true},
    {R"(a*)", "", true},
    {R"(a+)", "", false},
    {R"(a?b)", "b", true},
    {R"(a?b)", "aab", false},
    {R"(dense\.kernel)", "dense.kernel", true},
    {R"(dense\.kernel)", "densexkernel", false},
    {R"(dense.kernel)", "densexkernel", true},
    {R"((?:enc|dec)oder/.*)", "encoder/layer_0/kernel", true},
    {R"((?:enc|dec)oder/.*)", "coder/x", false},
    {R"([a-c]+)", "abcabc", true},
    {R"([a-c]+)", "abcd", false},
    {R"([\w/]+)", "d1/kernel", true},
    {R"(.*(attention|mlp).*/kernel)", "block_3/attention/query/kernel", true},
    {R"(.*(attention|mlp).*/kernel)", "block_3/norm/kernel", false},
    {R"((a*)*b)", "aaab", true},
    {R"((a*)*b)", "aaa", false},
    {R"(\s*x)", "  x", true},
    {R"(\D+)", "abc", true},
    {R"(\D+)", "a1c", false},};

struct rejected {
  std::string_view pattern;
  std::size_t position;
};
constexpr rejected rejected_patterns[] = {
    {"d{2}", 1}, {"^dense", 0}, {"dense$", 5}, {"*a", 0}, {"(a", 0}, {"a)", 1},
    {"[ab", 0},  {"a\\", 1},    {"(?=a)b", 0}, {"\\1", 0},
};
}  // namespace

TEST_CASE("layout_map keys match whole paths like Python's re.fullmatch", "[layout_map][regex]") {
  for (const auto& r : rows) {
    INFO("pattern " << r.pattern << " on path " << r.path);
    REQUIRE(tessel::regex::validate(r.pattern).ok);
    CHECK(tessel::regex::full_match(r.pattern, r.path) == r.expected);
  }
}

TEST_CASE("keys outside the supported regex subset are rejected with a position",
          "[layout_map][regex]") {
  for (const auto& r : rejected_patterns) {
    INFO("pattern " << r.pattern);
    const auto v = tessel::regex::validate(r.pattern);
    CHECK_FALSE(v.ok);
    CHECK(v.position == r.position);
    CHECK_FALSE(v.message.empty());
  }
}

TEST_CASE("Keras LayoutMap lookups: exact key first, one pattern, or an ambiguity",
          "[layout_map]") {
  using mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
  using map = tessel::layout_map<mesh, tessel::rule<"dense/kernel", tessel::none, "model">,
                                 tessel::rule<".*dense.*bias", "model">,
                                 tessel::rule<".*bias", "model">>;
  CHECK(map::find("dense/kernel").kind == tessel::lookup_result::exact);
  const auto two = map::find("dense_2/bias");
  CHECK(two.kind == tessel::lookup_result::ambiguous);
  CHECK(map::rules[two.index].key.view() == ".*dense.*bias");
  CHECK(map::rules[two.second].key.view() == ".*bias");
  const auto one = map::find("conv/bias");
  CHECK(one.kind == tessel::lookup_result::pattern);
  CHECK(map::rules[one.index].key.view() == ".*bias");
  CHECK(map::find("conv/kernel").kind == tessel::lookup_result::none_matched);
}
