// The backend concepts: what a backend provides to layers, losses, metrics and optimizers, in
// small groups so that a new backend (CUDA) can be brought up, and checked, one group at a time,
// and a piece of code can say which group it needs (flashlight's TensorBackend and Kokkos's
// memory and execution spaces are split the same way). backend_interface is all of them: what
// `host` (Kokkos) and `cuda` implement.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string>

#include "../core/activations.hpp"
#include "../random/philox.hpp"

namespace tessel::backend {

// Memory and copies: buffers in the device's memory, views of parts of them, host transfers,
// and the memory the collectives read and write.
template <class B>
concept backend_memory = requires(const typename B::matrix& m, std::span<const float> src,
                                  std::span<float> dst, float f, std::size_t n,
                                  const typename B::sums& s, std::span<double> host_sums) {
  typename B::matrix;        // a row-major 2-D float buffer in the device's memory
  typename B::index_vector;  // int32 labels in the device's memory
  typename B::sums;          // float64 sums (a step's loss and metrics) in the device's memory
  { B::make_sums(std::string{}, n) } -> std::same_as<typename B::sums>;
  { B::make_matrix(std::string{}, n, n) } -> std::same_as<typename B::matrix>;
  { B::make_zeros(std::string{}, n, n) } -> std::same_as<typename B::matrix>;
  { B::make_indices(std::string{}, n) } -> std::same_as<typename B::index_vector>;
  { B::rows(m) } -> std::same_as<std::size_t>;
  { B::cols(m) } -> std::same_as<std::size_t>;
  { B::row_range(m, n, n) } -> std::same_as<typename B::matrix>;
  { B::alias(m, n, n, n) } -> std::same_as<typename B::matrix>;  // a view of part of m
  { B::comm_span(m) } -> std::same_as<std::span<float>>;  // the memory collectives use
  B::upload(src, m);
  B::download(m, dst);
  B::download(s, host_sums);  // a step's one read-back
  B::fill(m, f);
  B::copy(m, m);
};

// Dense algebra: c = alpha * op(a) * op(b) + beta * c.
template <class B>
concept backend_gemm = backend_memory<B> && requires(const typename B::matrix& m, float f,
                                                     bool b) {
  B::gemm(b, b, f, m, m, f, m);
  // y = activation(x w + bias), the epilogue applied as the product is written
  B::gemm_bias_activation(m, m, m, activation_kind::relu, m);
};

// Element-wise: bias broadcast, activations and their gradients, affine maps, sums.
template <class B>
concept backend_elementwise = backend_memory<B> && requires(const typename B::matrix& m, float f) {
  B::broadcast_rows(m, m);
  B::activation_forward(activation_kind::relu, m);
  B::activation_backward(activation_kind::relu, m, m, m);
  B::scale_shift(m, m, f, f);
  B::add(m, m, m);
  B::copy_columns(m, std::size_t{0}, m, std::size_t{0}, std::size_t{0});
};

// Reductions: column sums (bias gradients), the losses' sums with their gradients, and the
// metrics' counts, the sums written into a slot of device memory (no read-back).
template <class B>
concept backend_reductions = backend_memory<B> && requires(const typename B::matrix& m,
                                                           const typename B::index_vector& l,
                                                           const typename B::sums& s, float f,
                                                           std::size_t slot) {
  B::column_sums(m, m);
  B::activation_backward_bias(activation_kind::relu, m, m, m, m);  // dz and db in one pass
  B::crossentropy_on_probabilities(m, l, m, m, f, f, s, slot);
  B::softmax_cross_entropy(m, l, m, m, f, s, slot);
  B::mean_squared_error(m, m, m, f, s, slot);
  B::count_argmax_equal(m, l, m, s, slot);
};

// A class dimension split across devices (vocab-parallel softmax, cross-entropy and arg-max):
// kernels on this device's columns with per-row statistics in rows x 1 (or x 2) matrices,
// completed by all_reduces between the calls (layers/split_rows.hpp drives them).
template <class B>
concept backend_split_rows = backend_memory<B> && requires(const typename B::matrix& m,
                                                           const typename B::index_vector& l,
                                                           const typename B::sums& s, float f,
                                                           std::size_t n) {
  B::row_max(m, m);
  B::row_dot(m, m, m);
  B::exp_rows(m, m, m, m);
  B::divide_rows(m, m);
  B::softmax_backward_rows(m, m, m, m);
  B::target_terms(m, l, n, m, m, m);
  B::split_softmax_cross_entropy(m, l, n, m, m, m, f, s, n);
  B::crossentropy_terms(m, l, n, m, m, f, m, m);
  B::split_crossentropy(m, m, m, f, s, n);
  B::row_argmax(m, n, m);
  B::mean_squared_error(m, m, m, f, s, n, n);
};

// Randomness: dropout masks drawn at each element's global index.
template <class B>
concept backend_random = backend_memory<B> && requires(const typename B::matrix& m,
                                                       const random::stream& s, float f) {
  B::dropout(m, m, s, f, std::uint64_t{}, std::uint64_t{}, std::uint64_t{});
};

// One variable's tensors in an optimizer update: its value (updated in place), its gradient and
// up to three slots; which slots an optimizer reads is said at its update below, and a slot it
// does not use is an empty matrix.
template <class Matrix>
struct update_tensors {
  Matrix value, gradient, slot_a, slot_b, slot_c;
};

// The optimizers' fused updates, each over a list of variables at once (PyTorch's foreach /
// multi_tensor_apply): one launch per step for all of a model's variables, or a layer's.
//   sgd:     slot_a the momentum (read when momentum != 0)
//   adam:    slot_a the first moment, slot_b the second
//   rmsprop: slot_a the velocity, slot_b the momentum (momentum > 0), slot_c the average
//            gradient (centered)
template <class B>
concept backend_optimizers =
    backend_memory<B> &&
    requires(std::span<const update_tensors<typename B::matrix>> u, float f, bool b) {
      B::sgd_update(u, f, f, b);
      B::adam_update(u, f, f, f, f);
      B::rmsprop_update(u, f, f, f, f, b);
    };

// A layer's own kernels: f(i) for every i in [0, n), each i writing only its own outputs and
// costing about `cost` elements of work (the host splits the work among its threads by it). f is
// a functor over kernel bodies (backend/*_bodies.hpp); the CUDA backend runs one GPU thread per
// i, instantiated in the layer family's .cu file (backend/cuda_launch.hpp).
struct launch_probe {
  void operator()(std::size_t) const {}
};
template <class B>
concept backend_launch = requires(std::size_t n) { B::for_each("", n, n, launch_probe{}); };

template <class B>
concept backend_interface = backend_memory<B> && backend_gemm<B> && backend_elementwise<B> &&
                            backend_reductions<B> && backend_split_rows<B> &&
                            backend_random<B> && backend_optimizers<B> && backend_launch<B>;

}  // namespace tessel::backend
