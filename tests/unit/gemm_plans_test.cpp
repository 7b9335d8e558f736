// The CUDA backend's fused dense GEMM, as decided on the host (backend/gemm_plans.hpp): ReLU never
// in cuBLASLt's epilogue (which makes NaN 0), and plans keyed by the pointers' alignment (a
// row-range view starts at any row).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <tessel/backend/gemm_plans.hpp>
#include <tessel/backend/host.hpp>
#include <vector>

namespace gp = tessel::backend::gemm_plans;
using tessel::activation_kind;

TEST_CASE("gemm_plans: the alignment of a pointer, up to 256 bytes", "[gemm_plans]") {
  alignas(256) static float buffer[512];
  CHECK(gp::alignment_of(buffer) == 256);
  CHECK(gp::alignment_of(buffer + 1) == 4);
  CHECK(gp::alignment_of(buffer + 2) == 8);
  CHECK(gp::alignment_of(buffer + 4) == 16);
  CHECK(gp::alignment_of(buffer + 8) == 32);
  CHECK(gp::alignment_of(buffer + 64) == 256);
  CHECK(gp::alignment_of(buffer + 128) == 256);
  CHECK(gp::alignment_of(reinterpret_cast<const char*>(buffer) + 1) == 1);
  CHECK(gp::alignment_of(nullptr) == 256);
}

TEST_CASE("gemm_plans: a row-range view gets its own plan", "[gemm_plans]") {
  // A 10 x 7 matrix (rows of 28 bytes), 256-byte aligned: row 1 starts 4-byte aligned, row 8
  // 32-byte aligned; the same shapes at other alignments are other plans.
  alignas(256) static float x[10 * 7], w[7 * 5], y[10 * 5], bias[8];
  const auto e = gp::epilogue::bias;
  const gp::key whole = gp::make_key(x, 7, w, 5, bias, y, 5, 4, 5, 7, e, false);
  const gp::key row1 = gp::make_key(x + 7, 7, w, 5, bias, y + 5, 5, 4, 5, 7, e, false);
  const gp::key row8 = gp::make_key(x + 56, 7, w, 5, bias, y + 40, 5, 4, 5, 7, e, false);
  CHECK(whole.align_x == 256);
  CHECK(row1.align_x == 4);
  CHECK(row1.align_y == 4);
  CHECK(row8.align_x == 32);
  CHECK(row8.align_y == 32);
  CHECK_FALSE(whole == row1);
  CHECK_FALSE(row1 == row8);
  CHECK(whole == gp::make_key(x, 7, w, 5, bias, y, 5, 4, 5, 7, gp::epilogue::bias, false));
  CHECK_FALSE(whole == gp::make_key(x, 7, w, 5, bias, y, 5, 4, 5, 7, gp::epilogue::none, false));
  CHECK_FALSE(whole == gp::make_key(x, 7, w, 5, bias, y, 5, 4, 5, 7, gp::epilogue::bias, true));
  // The bias: a bias one element in is another plan (4-byte aligned); without the bias
  // epilogue its pointer does not key the plan.
  const gp::key bias1 = gp::make_key(x, 7, w, 5, bias + 1, y, 5, 4, 5, 7, e, false);
  CHECK(whole.align_bias == 256);
  CHECK(bias1.align_bias == 4);
  CHECK_FALSE(whole == bias1);
  CHECK(gp::make_key(x, 7, w, 5, bias + 1, y, 5, 4, 5, 7, gp::epilogue::none, false) ==
        gp::make_key(x, 7, w, 5, nullptr, y, 5, 4, 5, 7, gp::epilogue::none, false));
}

TEST_CASE("gemm_plans: a size past cuBLAS's int is an error naming it, not a wrap",
          "[gemm_plans]") {
  CHECK(gp::blas_int(0, "m") == 0);
  CHECK(gp::blas_int(2147483647u, "m") == 2147483647);
  const std::size_t past = std::size_t{1} << 31;
  CHECK_THROWS_WITH(gp::blas_int(past, "k"),
                    Catch::Contains("cuBLAS's GEMM takes int sizes, and its k would be "
                                    "2147483648, past 2147483647") &&
                        Catch::Contains("split the matrix"));
  CHECK_THROWS_AS(gp::blas_int(past * 3, "leading dimension"), tessel::value_error);
}

TEST_CASE("gemm_plans: ReLU runs after the GEMM, never in its epilogue", "[gemm_plans]") {
  // cuBLASLt's RELU epilogue gives 0 for NaN; Keras, JAX and the host backend keep NaN.
  const gp::dense_choice relu_bias = gp::choose_dense(true, activation_kind::relu);
  CHECK(relu_bias.fused);
  CHECK(relu_bias.gemm_epilogue == gp::epilogue::bias);
  CHECK(relu_bias.activation_after);
  const gp::dense_choice relu = gp::choose_dense(false, activation_kind::relu);
  CHECK(relu.fused);
  CHECK(relu.gemm_epilogue == gp::epilogue::none);
  CHECK(relu.activation_after);
  const gp::dense_choice linear = gp::choose_dense(true, activation_kind::linear);
  CHECK(linear.fused);
  CHECK(linear.gemm_epilogue == gp::epilogue::bias);
  CHECK_FALSE(linear.activation_after);
  CHECK_FALSE(gp::choose_dense(true, activation_kind::softmax).fused);
  CHECK_FALSE(gp::choose_dense(false, activation_kind::sigmoid).fused);
  // What the body after the GEMM must give, as the host backend's ReLU gives: NaN stays NaN.
  using host = tessel::backend::host;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const host::matrix m = host::make_matrix("relu", 1, 3);
  const std::vector<float> in{nan, -1.0f, 2.0f};
  host::upload(std::span<const float>(in), m);
  host::activation_forward(activation_kind::relu, m);
  std::vector<float> out(3);
  host::download(m, std::span<float>(out));
  CHECK(std::isnan(out[0]));
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == 2.0f);
}
