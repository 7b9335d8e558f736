// strided_matrix: the backends' matrices. A row-major rows x cols block of memory, rows `ld`
// elements apart, that shares the ownership of its allocation (a view of it, a block of rows or an
// alias into a bucket's buffer, keeps it alive), as Kokkos's View<T**, LayoutRight> and
// PyTorch's storage + strides do. The host backend's matrices, label vectors and sums
// (`host_access`: element access m(i, j) and v(i) from the CPU) and the CUDA backend's (device
// memory: pointers only). A vector is a column: n x 1, ld 1.
// It is the standard library alone, so a program's translation units see no Kokkos, BLAS or CUDA
// header through it: the host backend hands its kernels unmanaged Kokkos views of the same memory
// where they run (backend/host.hpp's definitions, compiled once in tessel::tessel).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace tessel::backend {

template <class T, bool host_access>
class strided_matrix {
 public:
  strided_matrix() = default;
  strided_matrix(std::shared_ptr<T> owner, T* p, std::size_t rows, std::size_t cols,
                 std::size_t ld)
      : owner_(std::move(owner)), p_(p), rows_(rows), cols_(cols), ld_(ld) {}

  [[nodiscard]] T* data() const noexcept { return p_; }
  [[nodiscard]] std::size_t extent(int d) const noexcept { return d == 0 ? rows_ : cols_; }
  [[nodiscard]] std::size_t stride(int d) const noexcept { return d == 0 ? ld_ : 1; }
  [[nodiscard]] std::size_t size() const noexcept { return rows_ * cols_; }
  [[nodiscard]] bool contiguous() const noexcept { return rows_ <= 1 || ld_ == cols_; }
  [[nodiscard]] const std::shared_ptr<T>& owner() const noexcept { return owner_; }

  // Element (i, j); element i of a vector.
  T& operator()(std::size_t i, std::size_t j) const noexcept
    requires host_access
  {
    return p_[i * ld_ + j];
  }
  T& operator()(std::size_t i) const noexcept
    requires host_access
  {
    return p_[i * ld_];
  }

 private:
  std::shared_ptr<T> owner_;
  T* p_ = nullptr;
  std::size_t rows_ = 0, cols_ = 0, ld_ = 0;
};

}  // namespace tessel::backend
