// The communicator concept: what the layers above need of a group of processes, so that the
// runtime, the collectives on tensor dimensions and the model are written against it, not against
// MPI. comm::communicator (MPI, host memory) models it; comm::local_communicator (one process,
// copies) does too, and NCCL's communicator will. Non-blocking collectives return a request that
// can be waited for and tested, as an MPI request or a CUDA event can.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

namespace tessel::comm {

// The reduction of an all_reduce: sums (gradients, partial products, losses) and maxima (a
// softmax's row max and the arg-max of a class dimension split across devices, as Megatron's
// vocab-parallel cross-entropy reduces them).
enum class reduce_op : std::uint8_t { sum, max };

// wait() blocks until the collective is complete; test() lets it progress and says whether it
// is; pending() says, without progressing it, whether it may still be running.
template <class R>
concept request_like = std::movable<R> && requires(R r, const R& cr) {
  r.wait();
  { r.test() } -> std::same_as<bool>;
  { cr.pending() } -> std::same_as<bool>;
};

namespace detail {
template <class C, class T>
concept collectives_on = requires(const C& c, std::span<T> data, std::span<const T> in,
                                  std::span<T> out, int root) {
  c.all_reduce(data);
  c.all_reduce(data, reduce_op::max);
  c.all_gather(in, out);
  c.reduce_scatter(in, out);
  c.broadcast(data, root);
  c.reduce(data, root);
  c.all_to_all(in, out);
  // out = in, wherever the communicator's buffers live (host memory, or the GPU's for
  // cuda_communicator): a collective of one process, an all_reduce into another buffer, a slice.
  c.copy(in, out);
  { c.iall_reduce(data) } -> request_like;
  { c.iall_gather(in, out) } -> request_like;
  { c.ireduce_scatter(in, out) } -> request_like;
  { c.ibroadcast(data, root) } -> request_like;
  { c.ireduce(data, root) } -> request_like;
  { c.iall_to_all(in, out) } -> request_like;
};
}  // namespace detail

// A group of size() processes, this one at rank(); all_reduce sums or takes the maximum. The
// element types are those the model moves: float values, double sums and counts, int32 flags,
// uint64 seeds and arg-max keys.
template <class C>
concept communicator_like = std::movable<C> && requires(const C& c) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.barrier();
} && detail::collectives_on<C, float> && detail::collectives_on<C, double> &&
    detail::collectives_on<C, std::int32_t> && detail::collectives_on<C, std::uint64_t>;

}  // namespace tessel::comm
