// global_average_pooling_2d on sharded NHWC tensors: Keras's GlobalAveragePooling2D
// (data_format "channels_last"), y[n, c] = mean over h, w of x[n, h, w, c], and its backward,
// dx[n, h, w, c] = dy[n, c] / (H·W). It works on dtensors: the batch (N) and the channels (C)
// may be sharded and need no collective (each output element reads only its own sample and
// channel); H and W must be whole on the device (a spatial split needs a reduction across
// devices, which the planner's reduce rule gives when this becomes a planned layer).
//
// The first layer written on rank-N sharded tensors rather than 2-D matrices: the NHWC block is
// viewed as (N·H·W, C) — a reshape, no copy — and each sample's H·W rows are summed.
#pragma once

#include <cstddef>
#include <string>

#include "../core/errors.hpp"
#include "../tensor/dtensor.hpp"

namespace tessel::layers {

namespace detail {
template <class LX, class LY, class B>
void check_pooling(const dtensor<LX, B>& x, const dtensor<LY, B>& y) {
  static_assert(LX::rank == 4, "global_average_pooling_2d: the input is NHWC, rank 4");
  static_assert(LY::rank == 2, "global_average_pooling_2d: the output is (N, C), rank 2");
  const shape_value& xs = x.local_shape();
  const shape_value& g = x.global_shape();
  if (xs[1] != g[1] || xs[2] != g[2])
    throw value_error("global_average_pooling_2d: H and W must be whole on each device; this "
                      "device holds a block of shape " + to_string(xs) + " of " + to_string(g) +
                      ". Shard the batch or the channels, not the spatial dimensions.");
  const shape_value& ys = y.local_shape();
  if (ys[0] != xs[0] || ys[1] != xs[3])
    throw value_error("global_average_pooling_2d: an input block of shape " + to_string(xs) +
                      " pools to (" + std::to_string(xs[0]) + ", " + std::to_string(xs[3]) +
                      "), but the output block has shape " + to_string(ys) +
                      "; lay out the output's batch and channels as the input's");
}
}  // namespace detail

// y = the mean of x over H and W.
template <class LX, class LY, class B>
void global_average_pooling_2d(const dtensor<LX, B>& x, dtensor<LY, B>& y) {
  detail::check_pooling(x, y);
  const shape_value& xs = x.local_shape();
  const std::size_t n = xs[0], pixels = xs[1] * xs[2], c = xs[3];
  const auto rows = x.view(n * pixels, c);  // NHWC as (N·H·W, C)
  const auto out = y.view(n, c);
  for (std::size_t i = 0; i < n; ++i)
    B::column_sums(B::row_range(rows, i * pixels, (i + 1) * pixels), B::row_range(out, i, i + 1));
  B::scale_shift(out, out, 1.0f / static_cast<float>(pixels), 0.0f);
}

// dx = dy spread evenly over H and W.
template <class LX, class LY, class B>
void global_average_pooling_2d_backward(const dtensor<LY, B>& dy, dtensor<LX, B>& dx) {
  detail::check_pooling(dx, dy);
  const shape_value& xs = dx.local_shape();
  const std::size_t n = xs[0], pixels = xs[1] * xs[2], c = xs[3];
  const auto rows = dx.view(n * pixels, c);
  const auto g = dy.view(n, c);
  for (std::size_t i = 0; i < n; ++i)
    B::broadcast_rows(B::row_range(g, i, i + 1), B::row_range(rows, i * pixels, (i + 1) * pixels));
  B::scale_shift(rows, rows, 1.0f / static_cast<float>(pixels), 0.0f);
}

}  // namespace tessel::layers
