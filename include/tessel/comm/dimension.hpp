// Collectives along any dimension of a row-major tensor, on any communicator of the concept.
// Each process holds a block of the tensor; along the dimension the processes' blocks follow each
// other in rank order. Along dimension 0 the blocks are contiguous and go to the collective as
// they are; along any other dimension they are packed into rank-major order first and unpacked
// after (what a user of NCCL does with a transpose around ncclAllGather).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "concept.hpp"

namespace tessel::comm {

namespace detail {
inline std::size_t elements(std::span<const std::size_t> shape) {
  std::size_t n = 1;
  for (const std::size_t e : shape) n *= e;
  return n;
}
TESSEL_INLINE std::string shape_text(std::span<const std::size_t> shape);
// Copies between a dense block (row-major, of shape `extent`) and the part of a row-major tensor
// of shape `whole` that starts at `offset`: out of the tensor (`from` is the tensor, `to` the
// block) when `out_of_whole`, into it otherwise.
template <class T>
void copy_block(std::span<const std::size_t> whole, std::span<const std::size_t> offset,
                std::span<const std::size_t> extent, const T* from, T* to, bool out_of_whole) {
  const std::size_t rank = whole.size();
  if (rank == 0 || elements(extent) == 0) return;
  const std::size_t run = extent[rank - 1];  // contiguous in both
  std::vector<std::size_t> stride(rank, 1), at(rank, 0);
  for (std::size_t d = rank - 1; d-- > 0;) stride[d] = stride[d + 1] * whole[d + 1];
  const std::size_t runs = elements(extent) / run;
  for (std::size_t k = 0; k < runs; ++k) {
    std::size_t t = 0;
    for (std::size_t d = 0; d < rank; ++d) t += (offset[d] + at[d]) * stride[d];
    if (out_of_whole)
      std::memcpy(to + k * run, from + t, run * sizeof(T));
    else
      std::memcpy(to + t, from + k * run, run * sizeof(T));
    for (std::size_t d = rank - 1; d-- > 0;) {  // the next run: an odometer over the outer dims
      if (++at[d] < extent[d]) break;
      at[d] = 0;
    }
  }
}
TESSEL_INLINE void check_dim(const char* what, std::span<const std::size_t> shape, std::size_t dim);
TESSEL_INLINE void check_size(const char* what, const char* buffer, std::size_t got,
                              std::size_t want, std::span<const std::size_t> shape);
}  // namespace detail

// `out` (shape `local` with dimension `dim` n times larger, n = c.size()) = every process's `in`
// (shape `local`), concatenated along `dim` in rank order.
template <communicator_like C, class T>
void all_gather_dim(const C& c, std::span<const std::size_t> local, std::size_t dim,
                    std::span<const T> in, std::span<T> out, std::vector<T>& scratch) {
  detail::check_dim("all_gather", local, dim);
  const auto n = static_cast<std::size_t>(c.size());
  std::vector<std::size_t> whole(local.begin(), local.end());
  whole[dim] *= n;
  detail::check_size("all_gather", "input", in.size(), detail::elements(local), local);
  detail::check_size("all_gather", "output", out.size(), detail::elements(whole), whole);
  if (n == 1 || detail::elements(local.first(dim)) == 1) return c.all_gather(in, out);
  scratch.resize(out.size());
  c.all_gather(in, std::span<T>(scratch));
  std::vector<std::size_t> offset(local.size(), 0);
  for (std::size_t p = 0; p < n; ++p) {
    offset[dim] = p * local[dim];
    detail::copy_block<T>(whole, offset, local, scratch.data() + p * in.size(), out.data(), false);
  }
}

// `out` (shape `local`) = this process's block along `dim` of the sum over processes of `in`
// (shape `local` with dimension `dim` n times larger).
template <communicator_like C, class T>
void reduce_scatter_dim(const C& c, std::span<const std::size_t> local, std::size_t dim,
                        std::span<const T> in, std::span<T> out, std::vector<T>& scratch) {
  detail::check_dim("reduce_scatter", local, dim);
  const auto n = static_cast<std::size_t>(c.size());
  std::vector<std::size_t> whole(local.begin(), local.end());
  whole[dim] *= n;
  detail::check_size("reduce_scatter", "input", in.size(), detail::elements(whole), whole);
  detail::check_size("reduce_scatter", "output", out.size(), detail::elements(local), local);
  if (n == 1 || detail::elements(local.first(dim)) == 1) return c.reduce_scatter(in, out);
  scratch.resize(in.size());
  std::vector<std::size_t> offset(local.size(), 0);
  for (std::size_t p = 0; p < n; ++p) {
    offset[dim] = p * local[dim];
    detail::copy_block<T>(whole, offset, local, in.data(), scratch.data() + p * out.size(), true);
  }
  c.reduce_scatter(std::span<const T>(scratch), out);
}

// Resharding from dimension `from` to dimension `to`: `in` has shape `local` (split along
// `from`, whole along `to`); `out` is whole along `from` and split along `to` (shape `local` with
// dimension `from` n times larger and `to` n times smaller). Block p of `in` along `to` goes to
// process p; the block from process q lands at position q along `from`.
template <communicator_like C, class T>
void all_to_all_dim(const C& c, std::span<const std::size_t> local, std::size_t from,
                    std::size_t to, std::span<const T> in, std::span<T> out,
                    std::vector<T>& scratch) {
  detail::check_dim("all_to_all", local, from);
  detail::check_dim("all_to_all", local, to);
  const auto n = static_cast<std::size_t>(c.size());
  if (from == to || local[to] % n != 0)
    throw value_error("tessel: all_to_all from dimension " + std::to_string(from) + " to " +
                      std::to_string(to) + " of a block of shape " + detail::shape_text(local) +
                      " over " + std::to_string(n) +
                      " processes needs two different dimensions "
                      "and dimension " +
                      std::to_string(to) + " divisible by " + std::to_string(n));
  std::vector<std::size_t> piece(local.begin(), local.end()), result(local.begin(), local.end());
  piece[to] /= n;  // what one process sends to one other
  result[to] /= n;
  result[from] *= n;
  detail::check_size("all_to_all", "input", in.size(), detail::elements(local), local);
  detail::check_size("all_to_all", "output", out.size(), detail::elements(result), result);
  const std::size_t block = detail::elements(piece);
  scratch.resize(2 * in.size());
  T* send = scratch.data();
  T* recv = scratch.data() + in.size();
  std::vector<std::size_t> offset(local.size(), 0);
  for (std::size_t p = 0; p < n; ++p) {
    offset[to] = p * piece[to];
    detail::copy_block<T>(local, offset, piece, in.data(), send + p * block, true);
  }
  c.all_to_all(std::span<const T>(send, in.size()), std::span<T>(recv, in.size()));
  std::fill(offset.begin(), offset.end(), 0);
  for (std::size_t q = 0; q < n; ++q) {
    offset[from] = q * piece[from];
    detail::copy_block<T>(result, offset, piece, recv + q * block, out.data(), false);
  }
}

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace detail {
TESSEL_INLINE std::string shape_text(std::span<const std::size_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}
TESSEL_INLINE void check_dim(const char* what, std::span<const std::size_t> shape,
                             std::size_t dim) {
  if (dim >= shape.size())
    throw value_error(std::string("tessel: ") + what + " on dimension " + std::to_string(dim) +
                      " of a tensor of shape " + shape_text(shape) + ", which has " +
                      std::to_string(shape.size()) + " dimensions");
}
TESSEL_INLINE void check_size(const char* what, const char* buffer, std::size_t got,
                              std::size_t want, std::span<const std::size_t> shape) {
  if (got != want)
    throw value_error(std::string("tessel: ") + what + ": the " + buffer + " holds " +
                      std::to_string(got) + " elements, but a tensor of shape " +
                      shape_text(shape) + " has " + std::to_string(want));
}
}  // namespace detail
#endif

}  // namespace tessel::comm
