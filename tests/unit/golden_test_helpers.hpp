// The helpers of the Keras-parity tests (golden_test.cpp, golden_models_test.cpp,
// golden_functional_test.cpp): the backend under test, the cases' readers and the summaries'.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tessel/tessel.hpp>
#if defined(TESSEL_GOLDEN_ON_CUDA)
#include <tessel/backend/cuda.hpp>
#endif
#include <vector>

#include "../support/golden.hpp"

namespace {

using json = nlohmann::json;
// The backend under test: the default (host) one, or the CUDA backend where tests/gpu/ builds this
// file again with TESSEL_GOLDEN_ON_CUDA (the golden Keras cases on the GPU).
#if defined(TESSEL_GOLDEN_ON_CUDA)
using B = tessel::backend::cuda;
#else
using B = tessel::default_backend;
#endif
using matrix = B::matrix;
template <class... Entries>
using model_on = tessel::basic_sequential<B, tessel::one_device, Entries...>;

using tessel::testing::golden::check_close;
using tessel::testing::golden::golden_dir;
using tessel::testing::golden::load;
using tessel::testing::golden::shape_of;
using tessel::testing::golden::to_array;
using tessel::testing::golden::values;
inline void check_close(const matrix& m, const json& expected, const std::string& what) {
  tessel::testing::golden::check_close<B>(m, expected, what);
}
matrix device(const json& a) { return tessel::testing::golden::device<B>(a); }

inline tessel::loss_spec loss_for(const std::string& name, bool sparse, bool logits) {
  if (name == "mse") return tessel::losses::mean_squared_error{};
  if (sparse) return tessel::losses::sparse_categorical_crossentropy{logits};
  return tessel::losses::categorical_crossentropy{logits};
}

// One layer, alone: its variables, forward and backward.
template <class L>
struct lone_layer {
  tessel::variable_store<B> vars;
  typename L::template runtime<B> rt;
  lone_layer(tessel::shape_value in, tessel::shape_value out)
      : rt(tessel::layer_info{"dense", in, out}, vars, 0) {}
};

template <class L>
void check_dense_case(const json& g, const json& c) {
  const auto xs = shape_of(g["x"]);
  lone_layer<L> layer(tessel::shape_value{xs[1]}, tessel::shape_value{3});
  layer.vars[0].assign(values(g["kernel"]));
  if (c["use_bias"].get<bool>()) layer.vars[1].assign(values(g["bias"]));
  const matrix x = device(g["x"]);
  tessel::pass_context ctx{.training = true};
  const matrix y = tessel::call_forward(layer.rt, tessel::batch_block<B>(x), ctx).local();
  const std::string name = c["activation"].get<std::string>();
  check_close(y, c["y"], "dense " + name + " y");
  const matrix dy = device(g["dy"]);
  const matrix dx = tessel::call_backward(layer.rt, tessel::batch_block<B>(x), dy, true, ctx);
  check_close(dx, c["dx"], "dense " + name + " dx");
  check_close(layer.vars[0].gradient, c["dkernel"], "dense " + name + " dkernel");
  if (c["use_bias"].get<bool>())
    check_close(layer.vars[1].gradient, c["dbias"], "dense " + name + " dbias");
}

template <class L>
void check_activation_case(const json& g, const json& c, const std::string& what) {
  const auto xs = shape_of(g["x"]);
  lone_layer<L> layer(tessel::shape_value{xs[1]}, tessel::shape_value{xs[1]});
  const matrix x = device(g["x"]);
  tessel::pass_context ctx{.training = true};
  check_close(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), ctx).local(), c["y"],
              what + " y");
  const matrix dy = device(g["dy"]);
  check_close(tessel::call_backward(layer.rt, tessel::batch_block<B>(x), dy, true, ctx), c["dx"],
              what + " dx");
}


// Splits UTF-8 text into code points (each box character is one).
inline std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}
// tessel's summary without its layout column: Keras's table (three columns, or four with a
// functional graph's "Connected to").
inline std::string without_layout_column(const std::string& text, bool connections = false) {
  std::istringstream in(text);
  std::ostringstream out;
  std::string line;
  // Cells up to the border before the layout column.
  const std::size_t cut =
      connections ? 1 + 31 + 1 + 27 + 1 + 17 + 1 + 28 : 1 + 38 + 1 + 29 + 1 + 17;
  while (std::getline(in, line)) {
    auto cps = code_points(line);
    if (cps.size() > cut && (cps[0] == "┏" || cps[0] == "┃" || cps[0] == "┡" || cps[0] == "│" ||
                             cps[0] == "├" || cps[0] == "└")) {
      std::string first3;
      for (std::size_t i = 1; i < cut; ++i) first3 += cps[i];
      if (cps[0] == "│" && first3.find_first_not_of(" │") == std::string::npos) continue;
      const std::string& sep = cps[cut];
      const std::string close = sep == "┳"   ? "┓"
                                : sep == "╇" ? "┩"
                                : sep == "┼" ? "┤"
                                : sep == "┴" ? "┘"
                                             : sep;
      line.clear();
      for (std::size_t i = 0; i < cut; ++i) line += cps[i];
      line += close;
    }
    out << line << "\n";
  }
  return out.str();
}
inline std::string read_text(const std::string& name) {
  std::ifstream in(golden_dir() + "/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace
