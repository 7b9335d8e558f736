// The kernel bodies both backends run (backend/kernel_bodies.hpp), on their own: a row's targets
// from a label or dense values, with the column offset of a split class dimension; arg-max ties
// (the first maximum, as NumPy); a row's maximum passing over NaN as std::max does; softmax; and
// the split-class cross-entropies, whose two halves over a row's column blocks give the loss and
// gradient the whole row's body gives.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tessel/backend/kernel_bodies.hpp>
#include <vector>

namespace kb = tessel::backend::kernel_bodies;

TEST_CASE("kernel_bodies: a row's targets from a label, with the split's column offset",
          "[kernel_bodies]") {
  const std::int32_t labels[] = {3, 7, -1};
  const kb::targets whole{labels, nullptr, 0, 0};
  CHECK(whole.row(0)(3) == 1.0f);
  CHECK(whole.row(0)(2) == 0.0f);
  CHECK(whole.row(1)(7) == 1.0f);
  // Columns 5.. of the class dimension: label 7 is this part's column 2; label 3 is not here.
  const kb::targets part{labels, nullptr, 0, 5};
  CHECK(part.row(1)(2) == 1.0f);
  CHECK(part.row(1)(7) == 0.0f);
  for (std::size_t j = 0; j < 4; ++j) CHECK(part.row(0)(j) == 0.0f);
  // A negative label matches no column.
  for (std::size_t j = 0; j < 8; ++j) CHECK(whole.row(2)(j) == 0.0f);
}

TEST_CASE("kernel_bodies: a row's targets from dense values, rows ld apart", "[kernel_bodies]") {
  const float dense[] = {0.1f, 0.2f, 0.7f, -9.0f, 0.5f, 0.25f, 0.25f, -9.0f};
  const kb::targets t{nullptr, dense, 4, 0};
  CHECK_FALSE(t.row(1).sparse);
  CHECK(t.row(0)(2) == 0.7f);
  CHECK(t.row(1)(0) == 0.5f);
  CHECK(t.row(1)(2) == 0.25f);
}

TEST_CASE("kernel_bodies: arg-max takes the first maximum; matches against labels and targets",
          "[kernel_bodies]") {
  const float p[] = {0.1f, 0.4f, 0.4f, 0.1f};
  CHECK(kb::argmax_row(p, 4) == std::size_t{1});
  CHECK(kb::argmax_row(p, 1) == std::size_t{0});
  const std::int32_t labels[] = {1, 2};
  const kb::targets sparse{labels, nullptr, 0, 0};
  CHECK(kb::argmax_matches(p, 4, sparse.row(0)));
  CHECK_FALSE(kb::argmax_matches(p, 4, sparse.row(1)));
  // Dense targets tied the other way: their first maximum is column 2.
  const float tied[] = {0.0f, 0.0f, 0.5f, 0.5f};
  const kb::targets dense{nullptr, tied, 4, 0};
  CHECK_FALSE(kb::argmax_matches(p, 4, dense.row(0)));
}

TEST_CASE("kernel_bodies: a row's maximum passes over NaN; softmax sums to 1", "[kernel_bodies]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float r[] = {1.0f, nan, 3.0f, 2.0f};
  CHECK(kb::row_max(r, 4) == 3.0f);
  CHECK(kb::row_max(r, 0) == -std::numeric_limits<float>::infinity());
  float s[] = {1.0f, 2.0f, 3.0f, -40.0f};
  kb::softmax_row(s, 4);
  CHECK(s[0] + s[1] + s[2] + s[3] == Approx(1.0f));
  CHECK(s[2] / s[1] == Approx(std::exp(1.0f)));
  CHECK(s[3] > 0.0f);
}

TEST_CASE("kernel_bodies: the split-class cross-entropies equal the whole row's",
          "[kernel_bodies]") {
  constexpr std::size_t n = 7, cut = 3;  // the row's columns [0, cut) and [cut, n) on two parts
  const float z[n] = {0.3f, -1.2f, 2.5f, 0.0f, 1.1f, -0.4f, 0.8f};
  const std::int32_t labels[] = {4};
  const float dense[n] = {0.1f, 0.0f, 0.2f, 0.3f, 0.0f, 0.25f, 0.15f};
  const kb::targets sparse{labels, nullptr, 0, 0}, one_hot{nullptr, dense, n, 0};
  for (const kb::targets& t : {sparse, one_hot}) {
    // On logits.
    float g_whole[n];
    const float loss = kb::softmax_crossentropy_row(z, n, t.row(0), 0.5f, g_whole);
    const float mx = std::max(kb::row_max(z, cut), kb::row_max(z + cut, n - cut));
    float g[n];
    const float s = kb::exp_row(z, mx, g, cut) + kb::exp_row(z + cut, mx, g + cut, n - cut);
    const kb::targets second{t.labels, t.dense == nullptr ? nullptr : t.dense + cut, t.ld, cut};
    float tz0 = 0, ts0 = 0, tz1 = 0, ts1 = 0;
    kb::target_terms_row(z, cut, t.row(0), mx, tz0, ts0);
    kb::target_terms_row(z + cut, n - cut, second.row(0), mx, tz1, ts1);
    const float l0 = kb::split_softmax_crossentropy_row(g, cut, t.row(0), s, tz0 + tz1,
                                                        ts0 + ts1, 0.5f);
    const float l1 = kb::split_softmax_crossentropy_row(g + cut, n - cut, second.row(0), s,
                                                        tz0 + tz1, ts0 + ts1, 0.5f);
    CHECK(l0 == l1);  // each part computes the row's loss
    CHECK(l0 == Approx(loss).epsilon(1e-6));
    for (std::size_t j = 0; j < n; ++j) CHECK(g[j] == Approx(g_whole[j]).margin(1e-6));

    // On probabilities (softmax's output): the terms of each part, then the gradient's finish.
    float p[n];
    for (std::size_t j = 0; j < n; ++j) p[j] = z[j];
    kb::softmax_row(p, n);
    float q_whole[n];
    const float xent = kb::crossentropy_row(p, n, t.row(0), 1e-7f, 1.0f, q_whole);
    const float ps = kb::row_sum(p, cut) + kb::row_sum(p + cut, n - cut);
    float q[n], loss0 = 0, dot0 = 0, loss1 = 0, dot1 = 0;
    kb::crossentropy_terms_row(p, cut, t.row(0), ps, 1e-7f, q, loss0, dot0);
    kb::crossentropy_terms_row(p + cut, n - cut, second.row(0), ps, 1e-7f, q + cut, loss1, dot1);
    kb::crossentropy_gradient_row(q, cut, dot0 + dot1, ps, 1.0f);
    kb::crossentropy_gradient_row(q + cut, n - cut, dot0 + dot1, ps, 1.0f);
    CHECK(loss0 + loss1 == Approx(xent).epsilon(1e-6));
    for (std::size_t j = 0; j < n; ++j) CHECK(q[j] == Approx(q_whole[j]).margin(1e-6));
  }
}

TEST_CASE("kernel_bodies: column sums of a block of columns, in row order", "[kernel_bodies]") {
  // 3 rows of 5, ld 6 (a padding column never read).
  const float m[] = {1, 2, 3, 4, 5, 99, 10, 20, 30, 40, 50, 99, 100, 200, 300, 400, 500, 99};
  float out[3] = {-1, -1, -1};
  kb::column_sums(m + 1, 6, 3, 3, out);  // columns 1..3
  CHECK(out[0] == 222.0f);
  CHECK(out[1] == 333.0f);
  CHECK(out[2] == 444.0f);
}
