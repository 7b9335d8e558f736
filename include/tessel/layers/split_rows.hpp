// Rows whose class (last) dimension is split across devices, as Megatron's vocab-parallel
// softmax and cross-entropy split them: each device holds some columns of every row it has, and
// a row's maximum and sums are completed by all_reduces over the mesh axes the columns are split
// over, between kernels that work on the local columns. `Reduce` is what runs those all_reduces
// and logs them (runtime/reshard.hpp's tensor_resharder: reduce_rows(rows, axes, op)); the
// plan lists them as "row max", "row sum", "target terms" and "row arg-max" steps.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "../comm/concept.hpp"
#include "../core/shard.hpp"
#include "../tensor/dtensor.hpp"

namespace tessel {

// The mesh axes the last dimension of a tensor laid out by `l` is split over (0: whole rows).
constexpr std::uint32_t class_axes(const layout_value& l) noexcept {
  return l.rank ? l.dims[l.rank - 1].mask() : 0u;
}

// The per-row statistics of a block: its rows' maximum, their sum and two terms per row, in
// buffers kept between steps (resized only when they grow).
template <class B>
struct row_statistics {
  using matrix = typename B::matrix;
  matrix max, sum, terms;
  void size(std::size_t rows) {
    max = sized<B>(max_store_, rows, 1, "row_max");
    sum = sized<B>(sum_store_, rows, 1, "row_sum");
    terms = sized<B>(terms_store_, rows, 2, "row_terms");
  }

 private:
  matrix max_store_, sum_store_, terms_store_;
};

// Any `Reduce` (a model's resharder) behind one call, for code compiled once per backend rather
// than once per mesh and communicator (a loss): reduce_rows(rows, axes, op) on a block's
// per-row values. It refers to the reducer, which must outlive it.
template <class B>
class row_reducer {
 public:
  template <class Reduce>
    requires(!std::is_same_v<std::remove_cvref_t<Reduce>, row_reducer>)
  explicit row_reducer(Reduce& r) noexcept
      : target_(const_cast<std::remove_const_t<Reduce>*>(&r)), call_([](void* t, const typename B::matrix& rows, std::uint32_t axes,
                              comm::reduce_op op) {
          static_cast<Reduce*>(t)->reduce_rows(rows, axes, op);
        }) {}
  void reduce_rows(const typename B::matrix& rows, std::uint32_t axes, comm::reduce_op op) const {
    call_(target_, rows, axes, op);
  }

 private:
  void* target_;
  void (*call_)(void*, const typename B::matrix&, std::uint32_t, comm::reduce_op);
};

// dst = exp(src - the whole row's max) (dst may be src), with st.max and st.sum completed over
// `axes`: the local row max, its all_reduce (max), the exponentials and their row sum, its
// all_reduce (sum). A softmax's forward and a cross-entropy on logits both start so.
template <class B, class Reduce>
void split_exp_rows(const typename B::matrix& src, const typename B::matrix& dst,
                    std::uint32_t axes, row_statistics<B>& st, Reduce& reduce) {
  B::row_max(src, st.max);
  reduce.reduce_rows(st.max, axes, comm::reduce_op::max);
  B::exp_rows(src, st.max, dst, st.sum);
  reduce.reduce_rows(st.sum, axes, comm::reduce_op::sum);
}

// softmax over the last dimension of `y`'s block, in place: the exponentials over the completed
// row max, divided by their completed row sum.
template <class B, class Reduce>
void split_softmax_forward(const basic_dtensor<B>& y, row_statistics<B>& st, Reduce& reduce) {
  const typename B::matrix& m = y.local();
  st.size(B::rows(m));
  split_exp_rows<B>(m, m, class_axes(y.layout()), st, reduce);
  B::divide_rows(m, st.sum);
}

// Its gradient: dz = y * (dy - sum_j y_j dy_j), the row sum all_reduced; dz may be dy.
template <class B, class Reduce>
void split_softmax_backward(const basic_dtensor<B>& y, const typename B::matrix& dy,
                            const typename B::matrix& dz, row_statistics<B>& st,
                            Reduce& reduce) {
  st.size(B::rows(dy));
  B::row_dot(y.local(), dy, st.sum);
  reduce.reduce_rows(st.sum, class_axes(y.layout()), comm::reduce_op::sum);
  B::softmax_backward_rows(y.local(), dy, st.sum, dz);
}

// The arg-max of every row of `pred`'s block over the whole class dimension (the first maximum,
// as NumPy's argmax), for the accuracies: each device's (max, index) per row is made one key
// whose order is the value's, then the lower index's; the keys' maximum is all_reduced.
template <class B, class Reduce>
void split_argmax(const basic_dtensor<B>& pred, typename B::matrix& store,
                  std::vector<float>& host, std::vector<std::uint64_t>& keys,
                  std::vector<std::size_t>& out, Reduce& reduce) {
  const std::size_t rows = B::rows(pred.local());
  const typename B::matrix pairs = sized<B>(store, rows, 2, "row_argmax");
  B::row_argmax(pred.local(), pred.shard().offset[pred.global_shape().rank - 1], pairs);
  host.resize(2 * rows);
  B::download(pairs, std::span<float>(host));
  keys.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    auto bits = std::bit_cast<std::uint32_t>(host[2 * i]);
    // Larger floats, larger keys: flip every bit of a negative value, the sign of a positive.
    bits = (bits >> 31) ? ~bits : bits | 0x80000000u;
    const auto index = static_cast<std::uint32_t>(host[2 * i + 1]);
    keys[i] = (static_cast<std::uint64_t>(bits) << 32) | (0xFFFFFFFFu - index);
  }
  reduce.reduce_rows(std::span<std::uint64_t>(keys), class_axes(pred.layout()),
                     comm::reduce_op::max);
  out.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) out[i] = 0xFFFFFFFFu - (keys[i] & 0xFFFFFFFFu);
}

}  // namespace tessel
