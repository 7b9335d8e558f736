// backend_interface: what a backend provides to layers, losses, metrics and optimizers. Layers
// are written once against it; `host` (Kokkos) implements it today, a CUDA backend later.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string>

#include "../core/activations.hpp"
#include "../random/philox.hpp"

namespace tessel::backend {

template <class B>
concept backend_interface = requires(const typename B::matrix& m, const typename B::index_vector& l,
                                     std::span<const float> src, std::span<float> dst,
                                     const random::stream& s, float f, bool b, std::size_t n) {
  typename B::matrix;        // a row-major 2-D float buffer in the device's memory
  typename B::index_vector;  // int32 labels in the device's memory
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
  B::fill(m, f);
  B::copy(m, m);
  B::gemm(b, b, f, m, m, f, m);
  B::broadcast_rows(m, m);
  B::column_sums(m, m);
  B::activation_forward(activation_kind::relu, m);
  B::activation_backward(activation_kind::relu, m, m, m);
  B::scale_shift(m, m, f, f);
  B::dropout(m, m, s, f, std::uint64_t{}, std::uint64_t{}, std::uint64_t{});
  { B::crossentropy_on_probabilities(m, l, m, m, f, f) } -> std::same_as<double>;
  { B::softmax_cross_entropy(m, l, m, m, f) } -> std::same_as<double>;
  { B::mean_squared_error(m, m, m, f) } -> std::same_as<double>;
  { B::count_argmax_equal(m, l, m) } -> std::same_as<std::size_t>;
  B::sgd_update(m, m, m, f, f, b);
  B::adam_update(m, m, m, m, f, f, f, f);
  B::rmsprop_update(m, m, m, m, m, f, f, f, f, b);
};

}  // namespace tessel::backend
