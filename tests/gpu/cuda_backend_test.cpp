// The CUDA backend against the host backend, on a GPU: every operation of
// backend_interface on the same random inputs, within 1e-5 relative (dropout masks exactly), and
// an MLP with dropout trained on each, compared step by step. Label `gpu`: run by
// scripts/test-gpu.sh, which fails without a GPU; the first test fails here too, with CUDA's
// reason, rather than passing on a machine that has none.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <tessel/backend/cuda.hpp>
#include <tessel/tessel.hpp>
#include <vector>

namespace {

using H = tessel::backend::host;
using D = tessel::backend::cuda;
using tessel::activation_kind;

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// The same values on both backends.
struct both {
  H::matrix h;
  D::matrix d;
  both(std::size_t rows, std::size_t cols, const std::vector<float>& v)
      : h(H::make_matrix("h", rows, cols)), d(D::make_matrix("d", rows, cols)) {
    H::upload(v, h);
    D::upload(v, d);
  }
  both(std::size_t rows, std::size_t cols, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f)
      : both(rows, cols, random_values(rows * cols, seed, lo, hi)) {}
  static both empty() { return both(); }

 private:
  both() = default;
};
struct both_labels {
  H::index_vector h;
  D::index_vector d;
  both_labels(std::size_t n, std::size_t classes, std::uint32_t seed)
      : h(H::make_indices("h", n)), d(D::make_indices("d", n)) {
    std::mt19937 g(seed);
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = static_cast<std::int32_t>(g() % classes);
    H::upload(v, h);
    D::upload(v, d);
  }
  static both_labels none() { return both_labels(); }

 private:
  both_labels() = default;
};
struct both_sums {
  H::sums h = H::make_sums("h", 4);
  D::sums d = D::make_sums("d", 4);
};

std::vector<float> host_values(const H::matrix& m) {
  std::vector<float> v(m.size());
  H::download(m, v);
  return v;
}
std::vector<float> device_values(const D::matrix& m) {
  std::vector<float> v(m.size());
  D::download(m, v);
  return v;
}

// Relative 1e-5 of |host| + 0.1 * the largest |host| (a sum of cancelling terms cannot agree to
// 1e-5 of itself in float32 whatever its order), or exactly.
void check_equal(const both& m, const std::string& what, double rel = 1e-5) {
  const auto h = host_values(m.h), d = device_values(m.d);
  REQUIRE(h.size() == d.size());
  double scale = 0;
  for (float x : h) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  for (std::size_t i = 0; i < h.size(); ++i) {
    INFO(what << "[" << i << "]: host " << h[i] << ", cuda " << d[i]);
    if (std::isnan(h[i]) || std::isnan(d[i])) {
      REQUIRE((std::isnan(h[i]) && std::isnan(d[i])));
      continue;
    }
    if (rel == 0) REQUIRE(h[i] == d[i]);
    else REQUIRE(std::fabs(double{h[i]} - d[i]) <= rel * (std::fabs(h[i]) + 0.1 * scale) + 1e-7);
  }
}
void check_sum(const both_sums& s, std::size_t slot, const std::string& what) {
  std::vector<double> h(4), d(4);
  H::download(s.h, h);
  D::download(s.d, d);
  INFO(what << ": host " << h[slot] << ", cuda " << d[slot]);
  REQUIRE(std::fabs(h[slot] - d[slot]) <= 1e-5 * std::fabs(h[slot]) + 1e-9);
}

constexpr activation_kind all_activations[] = {activation_kind::linear, activation_kind::relu,
                                               activation_kind::sigmoid, activation_kind::tanh,
                                               activation_kind::softmax};

}  // namespace

TEST_CASE("cuda: the process has a GPU (else every test here fails, naming CUDA's reason)",
          "[gpu]") {
  // The context first: without a usable GPU it throws CUDA's reason, which Catch2 prints.
  REQUIRE(D::device() >= 0);
  REQUIRE(D::device_count() > 0);
  INFO("device " << D::device() << " of " << D::device_count());
  D::synchronize();
  // Keras's list_devices: the GPU by default, the CPU when asked.
  REQUIRE(tessel::list_devices() == std::vector<std::string>{"gpu:0"});
  REQUIRE(tessel::list_devices("GPU") == std::vector<std::string>{"gpu:0"});
  REQUIRE(tessel::list_devices("cpu") == std::vector<std::string>{"cpu:0"});
  try {
    (void)tessel::list_devices("tpu");
    FAIL("list_devices(\"tpu\") did not throw");
  } catch (const tessel::value_error& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("Unknown device_type: 'tpu'") &&
                               Catch::Contains("'cpu' and 'gpu'"));
  }
}

TEST_CASE("cuda: memory: upload, download, row ranges, aliases, fill, copy", "[gpu]") {
  both a(7, 5, 1);
  check_equal(a, "upload", 0);
  both b(7, 5, 2);
  H::copy(H::row_range(a.h, 2, 6), H::row_range(b.h, 1, 5));
  D::copy(D::row_range(a.d, 2, 6), D::row_range(b.d, 1, 5));
  check_equal(b, "copy of row ranges", 0);
  H::fill(H::row_range(b.h, 3, 4), 2.5f);
  D::fill(D::row_range(b.d, 3, 4), 2.5f);
  H::fill(H::alias(a.h, 5, 2, 3), 0.0f);
  D::fill(D::alias(a.d, 5, 2, 3), 0.0f);
  check_equal(b, "fill", 0);
  check_equal(a, "fill of an alias", 0);
  const D::matrix z = D::make_zeros("z", 3, 4);
  REQUIRE(device_values(z) == std::vector<float>(12, 0.0f));
  // Uploads queued back to back through the ring of 4 page-locked buffers (growing ones, and one
  // past its 8 MB that goes from pageable memory), each host buffer overwritten at once: every
  // matrix gets its own values.
  std::vector<D::matrix> ms;
  std::vector<std::vector<float>> want;
  std::vector<float> scratch;
  for (std::size_t i = 0; i < 11; ++i) {
    const std::size_t rows = i == 7 ? 2100 : 3 + 40 * i, cols = 1024;
    scratch = random_values(rows * cols, 300 + static_cast<std::uint32_t>(i));
    want.push_back(scratch);
    ms.push_back(D::make_matrix("ring", rows, cols));
    D::upload(scratch, ms.back());
    std::fill(scratch.begin(), scratch.end(), -1.0f);  // the host buffer reused at once
  }
  for (std::size_t i = 0; i < ms.size(); ++i) {
    INFO("upload " << i);
    REQUIRE(device_values(ms[i]) == want[i]);
  }
}

TEST_CASE("cuda: gemm in every transposition, with alpha, beta and an empty contraction",
          "[gpu]") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const std::size_t m = 33, n = 20, k = 47;
      both a(ta ? k : m, ta ? m : k, 3), b(tb ? n : k, tb ? k : n, 4), c(m, n, 5);
      H::gemm(ta, tb, 0.75f, a.h, b.h, 0.5f, c.h);
      D::gemm(ta, tb, 0.75f, a.d, b.d, 0.5f, c.d);
      check_equal(c, "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  // On row ranges (a block of a batch's rows), and over zero rows (beta * c).
  both x(40, 16, 6), w(16, 8, 7), y(40, 8, 8);
  H::gemm(false, false, 1.0f, H::row_range(x.h, 8, 24), w.h, 0.0f, H::row_range(y.h, 8, 24));
  D::gemm(false, false, 1.0f, D::row_range(x.d, 8, 24), w.d, 0.0f, D::row_range(y.d, 8, 24));
  check_equal(y, "gemm on row ranges");
  H::gemm(true, false, 1.0f, H::row_range(x.h, 0, 0), H::row_range(y.h, 0, 0), 0.5f, w.h);
  D::gemm(true, false, 1.0f, D::row_range(x.d, 0, 0), D::row_range(y.d, 0, 0), 0.5f, w.d);
  check_equal(w, "gemm over zero rows");
}

TEST_CASE("cuda: dense's fused forward and backward for every activation", "[gpu]") {
  for (activation_kind a : all_activations) {
    const std::string name(tessel::activation_name(a));
    both x(32, 24, 10), w(24, 12, 11), bias(1, 12, 12), y(32, 12, 13);
    H::gemm_bias_activation(x.h, w.h, H::matrix(), a, y.h);  // no bias
    D::gemm_bias_activation(x.d, w.d, D::matrix(), a, y.d);
    check_equal(y, name + " forward without bias");
    H::gemm_bias_activation(x.h, w.h, bias.h, a, y.h);
    D::gemm_bias_activation(x.d, w.d, bias.d, a, y.d);
    check_equal(y, name + " forward");
    // On a block of rows (a batch's shard), the rows outside untouched.
    H::gemm_bias_activation(H::row_range(x.h, 5, 29), w.h, bias.h, a, H::row_range(y.h, 3, 27));
    D::gemm_bias_activation(D::row_range(x.d, 5, 29), w.d, bias.d, a, D::row_range(y.d, 3, 27));
    check_equal(y, name + " forward on row ranges");
    both dy(32, 12, 14), dz(32, 12, 15), db(1, 12, 16);
    H::activation_backward_bias(a, y.h, dy.h, dz.h, db.h);
    D::activation_backward_bias(a, y.d, dy.d, dz.d, db.d);
    check_equal(dz, name + " backward");
    check_equal(db, name + " bias gradient");
    H::activation_backward(a, y.h, dy.h, dy.h);  // in place
    D::activation_backward(a, y.d, dy.d, dy.d);
    check_equal(dy, name + " backward in place");
    both m(9, 12, 17);
    H::activation_forward(a, m.h);
    D::activation_forward(a, m.d);
    check_equal(m, name + " activation_forward");
  }
  // A NaN stays NaN through ReLU (jax.nn.relu's max(x, 0) keeps it), in the fused epilogue too.
  std::vector<float> with_nan = random_values(8 * 6, 27);
  with_nan[6] = std::nanf("");
  both xn(8, 6, with_nan), wn(6, 5, 28), bn(1, 5, 29), yn(8, 5, 30);
  H::gemm_bias_activation(xn.h, wn.h, bn.h, activation_kind::relu, yn.h);
  D::gemm_bias_activation(xn.d, wn.d, bn.d, activation_kind::relu, yn.d);
  REQUIRE(std::isnan(host_values(yn.h)[5]));
  check_equal(yn, "relu of NaN");
  // Linear and ReLU ran through cuBLASLt (a plan that fails falls back to a GEMM and a kernel
  // with the same results, which would hide it), on row ranges too (plans of their alignment).
  auto& ctx = tessel::backend::cuda_detail::ctx();
  for (activation_kind a : {activation_kind::linear, activation_kind::relu}) {
    const std::size_t fused = ctx.fused_dense, unfused = ctx.unfused_dense;
    both xf(32, 24, 40), wf(24, 12, 41), bf(1, 12, 42), yf(32, 12, 43);
    D::gemm_bias_activation(xf.d, wf.d, bf.d, a, yf.d);
    D::gemm_bias_activation(D::row_range(xf.d, 5, 29), wf.d, bf.d, a, D::row_range(yf.d, 3, 27));
    D::gemm_bias_activation(D::row_range(xf.d, 1, 9), wf.d, bf.d, a, D::row_range(yf.d, 1, 9));
    CHECK(ctx.fused_dense == fused + 3);
    CHECK(ctx.unfused_dense == unfused);
  }
  both y(30, 8, 20), bias(1, 8, 21);
  H::broadcast_rows(bias.h, y.h);
  D::broadcast_rows(bias.d, y.d);
  check_equal(y, "broadcast_rows", 0);
  both big(300, 70, 23);
  both sums70(1, 70, 24);
  H::column_sums(big.h, sums70.h);
  D::column_sums(big.d, sums70.d);
  check_equal(sums70, "column_sums");
  // Many rows, over two blocks of columns: the rows split over the GPU, then each column's
  // splits added.
  both tall(5000, 33, 27), sums33(1, 33, 28);
  H::column_sums(tall.h, sums33.h);
  D::column_sums(tall.d, sums33.d);
  check_equal(sums33, "column_sums over 5,000 rows");
  both s(11, 13, 25), out(11, 13, 26);
  H::scale_shift(s.h, out.h, 1.0f / 255.0f, -0.5f);
  D::scale_shift(s.d, out.d, 1.0f / 255.0f, -0.5f);
  check_equal(out, "scale_shift");
  both addend(11, 13, 27), summed(11, 13, 28);
  H::add(s.h, addend.h, summed.h);
  D::add(s.d, addend.d, summed.d);
  check_equal(summed, "add", 0);
}

TEST_CASE("cuda: dropout draws the host's masks, bit for bit, on blocks of the batch", "[gpu]") {
  const tessel::random::stream st(1234, 7, 3);
  both x(16, 40, 30), y(16, 40, 31);
  H::dropout(x.h, y.h, st, 0.3f, 5, 8, 100);
  D::dropout(x.d, y.d, st, 0.3f, 5, 8, 100);
  check_equal(y, "dropout", 0);
}

TEST_CASE("cuda: losses and their gradients, sparse and one-hot; the accuracy counts", "[gpu]") {
  for (bool sparse : {true, false}) {
    const std::string kind = sparse ? "sparse" : "one-hot";
    both_labels labels = sparse ? both_labels(45, 10, 40) : both_labels::none();
    std::vector<float> onehot(45 * 10, 0.0f);
    for (std::size_t i = 0; i < 45; ++i) onehot[i * 10 + (i * 7) % 10] = 1.0f;
    both targets = sparse ? both::empty() : both(45, 10, onehot);
    both_sums s;
    both logits(45, 10, 41, -3.0f, 3.0f), grad(45, 10, 42);
    H::softmax_cross_entropy(logits.h, labels.h, targets.h, grad.h, 1.0f / 45, s.h, 0);
    D::softmax_cross_entropy(logits.d, labels.d, targets.d, grad.d, 1.0f / 45, s.d, 0);
    check_sum(s, 0, kind + " softmax cross-entropy");
    check_equal(grad, kind + " softmax cross-entropy gradient");
    both probs(45, 10, 43, 0.0f, 1.0f);
    H::crossentropy_on_probabilities(probs.h, labels.h, targets.h, grad.h, 1.0f / 45, 1e-7f,
                                     s.h, 1);
    D::crossentropy_on_probabilities(probs.d, labels.d, targets.d, grad.d, 1.0f / 45, 1e-7f,
                                     s.d, 1);
    check_sum(s, 1, kind + " cross-entropy on probabilities");
    check_equal(grad, kind + " cross-entropy gradient");
    H::count_argmax_equal(logits.h, labels.h, targets.h, s.h, 2);
    D::count_argmax_equal(logits.d, labels.d, targets.d, s.d, 2);
    check_sum(s, 2, kind + " accuracy count");
  }
  both_sums s;
  both pred(300, 6, 44), targets(300, 6, 45), grad(300, 6, 46);
  H::mean_squared_error(pred.h, targets.h, grad.h, 1.0f / 300, s.h, 3);
  D::mean_squared_error(pred.d, targets.d, grad.d, 1.0f / 300, s.d, 3);
  check_sum(s, 3, "mean squared error over 300 rows");
  check_equal(grad, "mean squared error gradient");
  // Wide rows (a block per row, its threads over 1,000 elements): every element-wise loss.
  both_sums w;
  both wp(70, 1000, 47, -2.0f, 2.0f), wt(70, 1000, 48, 0.0f, 1.0f), wg(70, 1000, 49);
  H::mean_squared_error(wp.h, wt.h, wg.h, 1.0f / 70, w.h, 0);
  D::mean_squared_error(wp.d, wt.d, wg.d, 1.0f / 70, w.d, 0);
  check_sum(w, 0, "mean squared error over rows of 1,000");
  check_equal(wg, "mean squared error gradient over rows of 1,000");
  H::binary_crossentropy(wp.h, wt.h, wg.h, 1.0f / 70, true, 1e-7f, w.h, 1);
  D::binary_crossentropy(wp.d, wt.d, wg.d, 1.0f / 70, true, 1e-7f, w.d, 1);
  check_sum(w, 1, "binary cross-entropy on logits over rows of 1,000");
  check_equal(wg, "binary cross-entropy gradient over rows of 1,000");
  H::mean_absolute_error(wp.h, wt.h, w.h, 2);
  D::mean_absolute_error(wp.d, wt.d, w.d, 2);
  check_sum(w, 2, "mean absolute error over rows of 1,000");
}

TEST_CASE("cuda: the split-class kernels (vocab-parallel softmax and cross-entropy)", "[gpu]") {
  both z(20, 9, 50, -2.0f, 2.0f), mx(20, 1, 51), sum(20, 1, 52), e(20, 9, 53),
      terms(20, 2, 54), arg(20, 2, 55), dot(20, 1, 56);
  H::row_max(z.h, mx.h);
  D::row_max(z.d, mx.d);
  check_equal(mx, "row_max", 0);
  H::exp_rows(z.h, mx.h, e.h, sum.h);
  D::exp_rows(z.d, mx.d, e.d, sum.d);
  check_equal(e, "exp_rows");
  check_equal(sum, "exp_rows sums");
  both_labels labels(20, 27, 57);
  const both no_targets = both::empty();
  H::target_terms(z.h, labels.h, 9, no_targets.h, mx.h, terms.h);
  D::target_terms(z.d, labels.d, 9, no_targets.d, mx.d, terms.d);
  check_equal(terms, "target_terms");
  both_sums s;
  H::split_softmax_cross_entropy(e.h, labels.h, 9, no_targets.h, sum.h, terms.h, 0.05f, s.h, 0);
  D::split_softmax_cross_entropy(e.d, labels.d, 9, no_targets.d, sum.d, terms.d, 0.05f, s.d, 0);
  check_sum(s, 0, "split softmax cross-entropy");
  check_equal(e, "split softmax cross-entropy gradient");
  both probs(20, 9, 58, 0.0f, 1.0f), grad(20, 9, 59);
  H::row_dot(probs.h, no_targets.h, sum.h);
  D::row_dot(probs.d, no_targets.d, sum.d);
  check_equal(sum, "row sums");
  H::crossentropy_terms(probs.h, labels.h, 9, no_targets.h, sum.h, 1e-7f, grad.h, terms.h);
  D::crossentropy_terms(probs.d, labels.d, 9, no_targets.d, sum.d, 1e-7f, grad.d, terms.d);
  check_equal(grad, "crossentropy_terms gradient");
  check_equal(terms, "crossentropy_terms");
  H::split_crossentropy(grad.h, sum.h, terms.h, 0.05f, s.h, 1);
  D::split_crossentropy(grad.d, sum.d, terms.d, 0.05f, s.d, 1);
  check_sum(s, 1, "split cross-entropy");
  check_equal(grad, "split cross-entropy gradient");
  H::row_dot(probs.h, z.h, dot.h);
  D::row_dot(probs.d, z.d, dot.d);
  check_equal(dot, "row_dot");
  both dz(20, 9, 60);
  H::softmax_backward_rows(probs.h, z.h, dot.h, dz.h);
  D::softmax_backward_rows(probs.d, z.d, dot.d, dz.d);
  check_equal(dz, "softmax_backward_rows");
  H::divide_rows(probs.h, sum.h);
  D::divide_rows(probs.d, sum.d);
  check_equal(probs, "divide_rows");
  H::row_argmax(z.h, 18, arg.h);
  D::row_argmax(z.d, 18, arg.d);
  check_equal(arg, "row_argmax", 0);
}

TEST_CASE("cuda: the fused optimizer updates over many variables at once", "[gpu]") {
  // 40 variables (more than one launch's 32), some empty, one large.
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < 40; ++i) sizes.push_back(i % 9 == 0 ? 0 : 17 * i + 3);
  sizes[5] = 70000;
  struct var {
    both value, gradient, a, b, c;
  };
  std::vector<var> vars;
  std::uint32_t seed = 100;
  for (std::size_t n : sizes)
    vars.push_back({both(1, n, seed++), both(1, n, seed++), both(1, n, seed++, 0.0f, 1.0f),
                    both(1, n, seed++, 0.0f, 1.0f), both(1, n, seed++, -0.1f, 0.1f)});
  auto run = [&](auto&& update_h, auto&& update_d) {
    std::vector<tessel::backend::update_tensors<H::matrix>> uh;
    std::vector<tessel::backend::update_tensors<D::matrix>> ud;
    for (auto& v : vars) {
      uh.push_back({v.value.h, v.gradient.h, v.a.h, v.b.h, v.c.h});
      ud.push_back({v.value.d, v.gradient.d, v.a.d, v.b.d, v.c.d});
    }
    update_h(std::span<const tessel::backend::update_tensors<H::matrix>>(uh));
    update_d(std::span<const tessel::backend::update_tensors<D::matrix>>(ud));
  };
  auto check_all = [&](const std::string& what) {
    for (std::size_t i = 0; i < vars.size(); ++i) {
      check_equal(vars[i].value, what + " value " + std::to_string(i));
      check_equal(vars[i].a, what + " slot a " + std::to_string(i));
      check_equal(vars[i].b, what + " slot b " + std::to_string(i));
      check_equal(vars[i].c, what + " slot c " + std::to_string(i));
    }
  };
  // Each optimizer from fresh slots (moments and velocities non-negative, as they are in
  // training; one optimizer's slots are not another's), three steps, then every tensor compared.
  auto fresh_slots = [&](std::uint32_t seed) {
    for (auto& v : vars) {
      const std::size_t n = v.value.h.size();
      for (both* t : {&v.a, &v.b}) {
        const auto r = random_values(n, seed++, 0.02f, 1.0f);  // >= avg^2 (centered RMSprop)
        H::upload(r, t->h);
        D::upload(r, t->d);
      }
      const auto r = random_values(n, seed++, -0.1f, 0.1f);
      H::upload(r, v.c.h);
      D::upload(r, v.c.d);
    }
  };
  auto three_steps = [&](const std::string& what, std::uint32_t seed, auto&& update_h,
                         auto&& update_d) {
    fresh_slots(seed);
    for (int step = 0; step < 3; ++step) run(update_h, update_d);
    check_all(what);
  };
  three_steps("adam", 1000, [](auto u) { H::adam_update(u, 0.001f, 0.9f, 0.999f, 1e-7f); },
              [](auto u) { D::adam_update(u, 0.001f, 0.9f, 0.999f, 1e-7f); });
  three_steps("sgd nesterov", 2000, [](auto u) { H::sgd_update(u, 0.01f, 0.9f, true); },
              [](auto u) { D::sgd_update(u, 0.01f, 0.9f, true); });
  three_steps("sgd momentum", 3000, [](auto u) { H::sgd_update(u, 0.01f, 0.5f, false); },
              [](auto u) { D::sgd_update(u, 0.01f, 0.5f, false); });
  three_steps("sgd", 4000, [](auto u) { H::sgd_update(u, 0.01f, 0.0f, false); },
              [](auto u) { D::sgd_update(u, 0.01f, 0.0f, false); });
  three_steps("rmsprop centered with momentum", 5000,
              [](auto u) { H::rmsprop_update(u, 0.001f, 0.9f, 0.5f, 1e-7f, true); },
              [](auto u) { D::rmsprop_update(u, 0.001f, 0.9f, 0.5f, 1e-7f, true); });
  three_steps("rmsprop", 6000,
              [](auto u) { H::rmsprop_update(u, 0.001f, 0.9f, 0.0f, 1e-7f, false); },
              [](auto u) { D::rmsprop_update(u, 0.001f, 0.9f, 0.0f, 1e-7f, false); });
}

TEST_CASE("cuda: an MLP with dropout trains on the GPU as on the host: losses, weights, "
          "predictions",
          "[gpu]") {
  using namespace tessel::layers;
  auto make = []<class Backend>(std::type_identity<Backend>) {
    return tessel::basic_sequential<Backend, tessel::one_device, input<20>,
                                    dense<64, {.activation = "relu"}>, dropout<0.2>,
                                    dense<32, {.activation = "tanh"}>, dense<5>>();
  };
  auto host_model = make(std::type_identity<H>{});
  auto gpu_model = make(std::type_identity<D>{});
  gpu_model.set_weights(host_model.get_weights());
  host_model.compile(tessel::optimizers::adam{},
                     tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                     {tessel::metrics::sparse_categorical_accuracy{}});
  gpu_model.compile(tessel::optimizers::adam{},
                    tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                    {tessel::metrics::sparse_categorical_accuracy{}});
  tessel::array<float> x({256, 20}, random_values(256 * 20, 70));
  std::vector<std::int32_t> labels(256);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 5);
  const tessel::array<std::int32_t> y({256}, labels);
  const auto hh = host_model.fit(x, y, {.batch_size = 32, .epochs = 3, .verbose = 0,
                                        .shuffle = false});
  const auto hg = gpu_model.fit(x, y, {.batch_size = 32, .epochs = 3, .verbose = 0,
                                       .shuffle = false});
  for (const char* key : {"loss", "sparse_categorical_accuracy"}) {
    const auto& a = hh.history.at(key);
    const auto& b = hg.history.at(key);
    REQUIRE(a.size() == 3);
    REQUIRE(b.size() == 3);
    for (std::size_t e = 0; e < a.size(); ++e) {
      INFO(key << " epoch " << e << ": host " << a[e] << ", cuda " << b[e]);
      REQUIRE(std::fabs(a[e] - b[e]) <= 1e-4 * std::fabs(a[e]) + 1e-6);
    }
  }
  const auto wh = host_model.get_weights(), wg = gpu_model.get_weights();
  REQUIRE(wh.size() == wg.size());
  for (std::size_t v = 0; v < wh.size(); ++v)
    for (std::size_t i = 0; i < wh[v].size(); ++i) {
      INFO("weight " << v << "[" << i << "]: host " << wh[v].values[i] << ", cuda "
                     << wg[v].values[i]);
      REQUIRE(std::fabs(wh[v].values[i] - wg[v].values[i]) <=
              1e-4 * std::fabs(wh[v].values[i]) + 1e-5);
    }
  const auto ph = host_model.predict(x), pg = gpu_model.predict(x);
  REQUIRE(ph.values.size() == pg.values.size());
  for (std::size_t i = 0; i < ph.values.size(); ++i) {
    INFO("prediction " << i << ": host " << ph.values[i] << ", cuda " << pg.values[i]);
    REQUIRE(std::fabs(ph.values[i] - pg.values[i]) <= 1e-4 * std::fabs(ph.values[i]) + 1e-5);
  }
}

TEST_CASE("cuda: the memory plan against the pool's peak (get_memory_info(\"GPU:0\"))", "[gpu]") {
  using namespace tessel::layers;
  const D::matrix started = D::make_zeros("context", 1, 1);  // (the GPU's counters in use)
  const tessel::memory_info before = tessel::get_memory_info("GPU:0");
  tessel::reset_memory_stats("GPU:0");
  tessel::memory_plan plan{};
  double measured = 0;
  {
    tessel::basic_sequential<D, tessel::one_device, input<784>, dense<256, {.activation = "relu"}>,
                             dense<256, {.activation = "relu"}>, dense<10>>
        m;
    m.compile(tessel::optimizers::adam{},
              tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
    tessel::array<float> x({64, 784}, random_values(64 * 784, 71));
    std::vector<std::int32_t> labels(64);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 10);
    const tessel::array<std::int32_t> y({64}, labels);
    for (int step = 0; step < 3; ++step) m.train_on_batch(x, y);
    plan = m.memory(64);
    measured = static_cast<double>(tessel::get_memory_info("GPU:0").peak - before.current);
  }
  const double diff = (static_cast<double>(plan.peak()) - measured) / measured;
  INFO("plan " << plan.peak() << " B, the pool's peak " << measured << " B, " << diff * 100
               << "%");
  CHECK(std::fabs(diff) <= 0.10);
  CHECK(tessel::get_memory_info("GPU:0").current == before.current);
}

TEST_CASE("cuda: a planned step's copies on GPU memory go through cuda_communicator", "[gpu]") {
  // An all_reduce into another buffer and a slice, as runtime/collectives.hpp runs them on a
  // group of one: the copies are the communicator's (on the GPU), never the host's memmove.
  using mesh = tessel::device_mesh<tessel::axis<"batch">>;
  const auto pm = tessel::process_mesh<mesh, tessel::comm::cuda_communicator>::local();
  const std::vector<float> v = random_values(48, 91);
  const D::matrix a = D::make_matrix("a", 1, 48), b = D::make_matrix("b", 1, 48);
  D::upload(v, a);
  D::fill(b, 0.0f);
  const std::span<const float> in(a.data(), 48);
  const std::span<float> out(b.data(), 48);
  tessel::comm::run_step(pm, tessel::reshard_step{.kind = tessel::collective::all_reduce}, in,
                         out);
  REQUIRE(device_values(b) == v);
  D::fill(b, 0.0f);
  tessel::comm::run_step(pm, tessel::reshard_step{.kind = tessel::collective::slice}, in, out);
  REQUIRE(device_values(b) == v);
  D::fill(b, 0.0f);
  tessel::comm::start_step(pm, tessel::reshard_step{.kind = tessel::collective::all_reduce}, in,
                           out)
      .wait();
  REQUIRE(device_values(b) == v);
  // Overlapping spans of one buffer (elements 0..39 to 8..47), which cudaMemcpy leaves undefined.
  pm.template axis<0>().copy(std::span<const float>(a.data(), 40),
                             std::span<float>(a.data() + 8, 40));
  std::vector<float> moved(v.begin(), v.begin() + 8);
  moved.insert(moved.end(), v.begin(), v.begin() + 40);
  REQUIRE(device_values(a) == moved);
}

TEST_CASE("cuda: NCCL on one rank: every collective on GPU memory, and the abort path",
          "[gpu][nccl]") {
#if !defined(TESSEL_HAVE_NCCL)
  FAIL("this build has no NCCL (TESSEL_HAVE_NCCL): build where the CUDA toolkit's NCCL is found");
#else
  using tessel::comm::nccl_group;
  nccl_group g(MPI_COMM_NULL, 0, 1, "a test group");
  const std::vector<float> v = random_values(40, 90);
  const D::matrix a = D::make_matrix("a", 1, 40), b = D::make_matrix("b", 1, 40);
  D::upload(v, a);
  g.wait(g.all_reduce(a.data(), b.data(), 40, tessel::comm::reduce_op::sum), "all_reduce");
  REQUIRE(device_values(b) == v);
  D::fill(b, 0.0f);
  g.finish(g.all_gather(a.data(), b.data(), 40));
  REQUIRE(device_values(b) == v);  // the compute stream waited for the gather
  D::fill(b, 0.0f);
  g.wait(g.reduce_scatter(a.data(), b.data(), 40), "reduce_scatter");
  REQUIRE(device_values(b) == v);
  D::fill(b, 0.0f);
  g.wait(g.all_to_all(a.data(), b.data(), 40), "all_to_all");
  REQUIRE(device_values(b) == v);
  g.wait(g.broadcast(b.data(), 40, 0), "broadcast");
  REQUIRE(device_values(b) == v);
  // A failure aborts the communicator and reports the process and the group; the default handler
  // would end the job, this one records the message.
  std::string message;
  auto saved = nccl_group::on_failure();
  nccl_group::on_failure() = [&](const std::string& m, bool) { message = m; };
  REQUIRE_THROWS_AS(g.fail("all_reduce", {true, false, "a planted failure"}),
                    tessel::runtime_error);
  nccl_group::on_failure() = saved;
  REQUIRE_THAT(message, Catch::Contains("NCCL all_reduce over a test group on process 0 of 1: "
                                        "a planted failure. Aborting the job."));
  try {
    (void)g.all_reduce(a.data(), b.data(), 40, tessel::comm::reduce_op::sum);
    FAIL("a collective on an aborted communicator did not throw");
  } catch (const tessel::runtime_error& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("aborted after an earlier failure"));
  }
#endif
}

TEST_CASE("cuda: a matrix that outlives the GPU context is freed without its stream", "[gpu]") {
  // The end of the initialize guard destroys the context and its stream; a tensor kept past it
  // must not queue its free on the destroyed stream.
  D::matrix kept = D::make_matrix("kept", 64, 64);
  D::fill(kept, 1.0f);
  tessel::backend::cuda_detail::ctx();  // the context exists
  REQUIRE(cudaStreamSynchronize(tessel::backend::cuda_detail::stream()) == cudaSuccess);
  tessel::backend::cuda_detail::context_slot().reset();
  kept = D::matrix();  // the last view goes: cudaFree, not cudaFreeAsync on a dead stream
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  // The next use makes a new context, as the next test does.
  D::matrix again = D::make_matrix("again", 8, 8);
  D::fill(again, 2.0f);
  REQUIRE(cudaStreamSynchronize(tessel::backend::cuda_detail::stream()) == cudaSuccess);
}
