// The backend concepts: the host backend models every group; a backend brought up one group at a
// time (here: memory and copies alone) models that group and is refused by the others.
#include <span>
#include <string>
#include <tessel/backend/default.hpp>

namespace {
using namespace tessel;
using H = default_backend;

static_assert(backend::backend_interface<H>);
static_assert(backend::backend_memory<H> && backend::backend_gemm<H> &&
              backend::backend_elementwise<H> && backend::backend_reductions<H> &&
              backend::backend_split_rows<H> && backend::backend_random<H> &&
              backend::backend_optimizers<H>);

struct memory_only {
  using matrix = H::matrix;
  using index_vector = H::index_vector;
  using sums = H::sums;
  static sums make_sums(const std::string&, std::size_t);
  static void download(const sums&, std::span<double>);
  static matrix make_matrix(const std::string&, std::size_t, std::size_t);
  static matrix make_zeros(const std::string&, std::size_t, std::size_t);
  static index_vector make_indices(const std::string&, std::size_t);
  static std::size_t rows(const matrix&);
  static std::size_t cols(const matrix&);
  static matrix row_range(const matrix&, std::size_t, std::size_t);
  static matrix alias(const matrix&, std::size_t, std::size_t, std::size_t);
  static std::span<float> comm_span(const matrix&);
  static void upload(std::span<const float>, const matrix&);
  static void download(const matrix&, std::span<float>);
  static void fill(const matrix&, float);
  static void copy(const matrix&, const matrix&);
};
static_assert(backend::backend_memory<memory_only>);
static_assert(!backend::backend_gemm<memory_only>);
static_assert(!backend::backend_elementwise<memory_only>);
static_assert(!backend::backend_reductions<memory_only>);
static_assert(!backend::backend_split_rows<memory_only>);
static_assert(!backend::backend_random<memory_only>);
static_assert(!backend::backend_optimizers<memory_only>);
static_assert(!backend::backend_interface<memory_only>);

// Adding the GEMM (with its fused dense epilogue) brings that group.
struct memory_and_gemm : memory_only {
  static void gemm(bool, bool, float, const matrix&, const matrix&, float, const matrix&);
  static void gemm_bias_activation(const matrix&, const matrix&, const matrix&, activation_kind,
                                   const matrix&);
};
static_assert(backend::backend_gemm<memory_and_gemm>);
static_assert(!backend::backend_interface<memory_and_gemm>);
}  // namespace
