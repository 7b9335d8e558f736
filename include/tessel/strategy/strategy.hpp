// tf.distribute's synchronous strategies over tessel's runtime: one replica per process
// (launched by mpiexec), each replica holding the whole model, the batch split and the gradients
// all-reduced as data_parallel does. A strategy is two things:
//   - a distribution type, usable wherever one is: tessel::sequential<tessel::mirrored_strategy<>,
//     input<784>, ...> trains as tessel::sequential<tessel::data_parallel<>, ...>;
//   - an object a program holds, with TensorFlow's members in snake_case: num_replicas_in_sync,
//     scope, run, reduce, gather, experimental_local_results, experimental_distribute_dataset,
//     distribute_datasets_from_function, compute_average_loss, and Keras 3's num_processes,
//     num_model_replicas, num_data_shards, data_shard_id.
// Made after tessel::initialize (it reads the job's processes); constructing one prints, from
// process 0, the line TensorFlow logs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/diagnostics.hpp"
#include "../core/distribution.hpp"
#include "../core/errors.hpp"
#include "../data/array.hpp"
#include "../data/array_ops.hpp"
#include "../data/dataset.hpp"
#include "../runtime/address.hpp"
#include "../runtime/world.hpp"
#include "../trainer/gradient_buckets.hpp"
#include "../trainer/strategy_scope.hpp"

#if TESSEL_DEFINITIONS
#include <nlohmann/json.hpp>
#endif

namespace tessel {

// tf.distribute.ReduceOp.
enum class reduce_op { sum, mean };

// tf.data.experimental.AutoShardPolicy: how experimental_distribute_dataset divides a dataset
// among the replicas. file: by the files a dataset reads (dataset::from_files), each replica
// opening only its own (refused on a dataset of arrays, as TensorFlow refuses an unshardable
// source); data: each replica takes its rows of every global batch; auto_: file when the dataset
// reads at least one file per replica, else data; off: none, each replica iterates the whole
// dataset and takes each of its batches as a per-replica batch.
enum class auto_shard_policy { auto_, file, data, off };

// tf.data.Options().experimental_distribute, as experimental_distribute_dataset takes it.
struct distribute_options {
  tessel::auto_shard_policy auto_shard_policy = tessel::auto_shard_policy::auto_;
};

// tf.distribute.experimental.CommunicationImplementation.
enum class communication_implementation { auto_, ring, nccl };

// tf.distribute.experimental.CommunicationOptions, as MultiWorkerMirroredStrategy takes them.
struct communication_options {
  // The size of the packs the gradients are reduced in: the gradient buckets' size
  // (gradient_options::bucket_cap_mb) of every model compiled in the strategy's scope; 0 keeps
  // tessel's 25 MB.
  std::size_t bytes_per_pack = 0;
  // The collective watchdog's timeout (tessel::set_collective_timeout): a collective that waits
  // longer ends the job, naming the processes that did not arrive.
  std::optional<double> timeout_seconds = std::nullopt;
  // auto_ and ring: the backend's communicator (MPI's collectives; NCCL's on GPUs); nccl: the
  // same, refused on a process without a GPU.
  communication_implementation implementation = communication_implementation::auto_;
};

// tf.distribute.InputContext: what distribute_datasets_from_function's function is given.
struct input_context {
  int num_input_pipelines = 1;   // one per process
  int input_pipeline_id = 0;     // this process's
  int num_replicas_in_sync = 1;  // replicas over all pipelines
  // The batch each replica takes of a global batch. As TensorFlow, the global batch must divide
  // by the replicas.
  [[nodiscard]] std::size_t get_per_replica_batch_size(std::size_t global_batch_size) const;
};

class strategy;

// TF_CONFIG as MultiWorkerMirroredStrategy reads it: {"cluster": {"chief": [...], "worker":
// [...]}, "task": {"type": "worker", "index": i}}. The workers are the chief's address, then the
// workers' (TensorFlow counts the chief as worker 0 of the collective).
struct tf_config {
  std::vector<std::string> chief, worker;
  std::string task_type;
  int task_index = 0;
  // This process's place among all workers.
  [[nodiscard]] int task_id() const noexcept {
    return task_type == "chief" ? task_index : static_cast<int>(chief.size()) + task_index;
  }
  [[nodiscard]] int num_workers() const noexcept {
    return static_cast<int>(chief.size() + worker.size());
  }
};
// TF_CONFIG's value parsed and checked, first on its own (a value_error naming the field), then
// against the MPI launcher's view: as many workers as the job has processes, this process's task
// at its rank (a value_error naming both views).
TESSEL_INLINE tf_config parse_tf_config(std::string_view text, int processes, int process);

// tf.distribute.ReplicaContext: where `run`'s function runs, one replica of the strategy's.
class replica_context {
 public:
  [[nodiscard]] int replica_id_in_sync_group() const noexcept { return id_; }
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return replicas_; }
  // Every replica's `value`, summed or averaged (a collective over the replicas).
  [[nodiscard]] float all_reduce(reduce_op op, float value) const;
  [[nodiscard]] double all_reduce(reduce_op op, double value) const;
  [[nodiscard]] std::vector<float> all_reduce(reduce_op op, std::vector<float> value) const;
  [[nodiscard]] array<float> all_reduce(reduce_op op, array<float> value) const;

 private:
  friend class strategy;
  replica_context(int id, int replicas) : id_(id), replicas_(replicas) {}
  int id_, replicas_;
};

// A dataset of global batches, each replica taking its rows of every batch: of a global batch of
// B rows over R replicas, replica r takes B / R rows, one more for the first B % R replicas (as
// the trainer splits a batch under data_parallel). One replica per process: iterating gives this
// process's rows.
template <class X, class Y>
class distributed_dataset {
 public:
  using element_type = typename dataset<X, Y>::element_type;
  class iterator {
   public:
    using value_type = element_type;
    // A replica's own batch (sharded by file) is the dataset's element itself, not a copy.
    const element_type& operator*() const { return own_ ? *it_ : slice_; }
    const element_type* operator->() const { return &**this; }
    iterator& operator++() {
      ++it_;
      take();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& i, std::default_sentinel_t) {
      return i.it_ == std::default_sentinel;
    }

   private:
    friend class distributed_dataset;
    iterator(typename dataset<X, Y>::iterator it, int replica, int replicas, bool own)
        : it_(std::move(it)), replica_(replica), replicas_(replicas), own_(own) {
      take();
    }
    void take();
    typename dataset<X, Y>::iterator it_;
    int replica_, replicas_;
    bool own_;
    element_type slice_;
  };

  iterator begin() const { return iterator(global_.begin(), replica_, replicas_, own_); }
  std::default_sentinel_t end() const { return {}; }
  // The global dataset's cardinality: every replica takes a part of each of its batches. Under
  // auto_shard_policy file, this replica's (unknown until its files are read).
  [[nodiscard]] std::optional<std::size_t> cardinality() const { return global_.cardinality(); }
  // Whether each replica reads its own files (auto_shard_policy file, or auto on a dataset of
  // enough files) rather than its rows of every global batch.
  [[nodiscard]] bool sharded_by_file() const noexcept { return own_; }

 private:
  friend class strategy;
  // own: `global` is this replica's own dataset (sharded by file): each of its batches is the
  // replica's whole, and the replicas end a pass together.
  distributed_dataset(dataset<X, Y> global, int replica, int replicas, bool own = false)
      : global_(std::move(global)), replica_(replica), replicas_(replicas), own_(own) {}
  dataset<X, Y> global_;
  int replica_, replicas_;
  bool own_;
};

namespace strategy_detail {
// Marks the code inside strategy.run (strategy_scope.hpp's in_replica) while it lives.
class replica_guard {
 public:
  replica_guard() : previous_(detail::strategy_scope.in_replica) {
    detail::strategy_scope.in_replica = true;
  }
  ~replica_guard() { detail::strategy_scope.in_replica = previous_; }
  replica_guard(const replica_guard&) = delete;
  replica_guard& operator=(const replica_guard&) = delete;

 private:
  bool previous_;
};
// Each array argument of run as words: a marker, its rank, then every dimension but the first
// (a replica's rows may differ); pairs (a distributed dataset's elements) in turn; other
// arguments add nothing.
inline constexpr std::size_t max_shape_words = 10;
template <class T>
void add_shapes(std::vector<std::uint64_t>& out, const array<T>& a) {
  out.push_back(0x5e7a9e);
  out.push_back(a.shape.size());
  for (std::size_t d = 1; d < a.shape.size() && d < max_shape_words - 1; ++d)
    out.push_back(a.shape[d]);
  out.resize(out.size() + (max_shape_words - std::min(a.shape.size() + 1, max_shape_words)));
}
template <class A, class B>
void add_shapes(std::vector<std::uint64_t>& out, const std::pair<A, B>& p) {
  add_shapes(out, p.first);
  add_shapes(out, p.second);
}
template <class T>
void add_shapes(std::vector<std::uint64_t>&, const T&) {}
// Every replica's words equal (an error on every process otherwise, naming the argument and
// both shapes), checked with one all_gather of the counts and one of the words.
TESSEL_INLINE void require_same_shapes(const std::vector<std::uint64_t>& words);
// Whether every replica has a next batch, agreed with one all_gather of a byte: replicas that
// read their own files end a pass together, at the first replica's end (a replica that stopped
// alone would leave the others waiting in their next collective). When some replicas had more,
// process 0 says which ran out and that the others' remaining batches were left this pass.
TESSEL_INLINE bool every_replica_has_next(bool mine);
}  // namespace strategy_detail

template <class X, class Y>
void distributed_dataset<X, Y>::iterator::take() {
  if (own_) {
    if (replicas_ > 1 && !strategy_detail::every_replica_has_next(it_ != std::default_sentinel))
      it_ = {};
    return;
  }
  if (it_ == std::default_sentinel) return;
  const element_type& global = *it_;
  if (global.first.shape.empty())
    throw value_error(
        "experimental_distribute_dataset: an element of rank 0 has no batch "
        "dimension to split; batch the dataset with the global batch size first");
  const std::size_t rows = global.first.shape[0];
  const row_split r = split_batch_rows(rows, static_cast<std::size_t>(replicas_),
                                       static_cast<std::size_t>(replica_));
  slice_ = {data::slice_rows(global.first, r.first, r.first + r.count),
            data::slice_rows(global.second, r.first, r.first + r.count)};
}

// What every strategy object has. The strategy types below derive from it and from their
// distribution type.
class strategy {
 public:
  // TF's num_replicas_in_sync: the replicas that train in step, one per process (1 for a
  // strategy whose model lives whole on each process).
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return replicas_; }
  // This process's replica.
  [[nodiscard]] int replica_id() const noexcept { return replica_; }
  // TensorFlow's name of the strategy ("MirroredStrategy").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  // `with strategy.scope():` — a guard. The model's type already says its strategy, so the scope
  // changes nothing but get_strategy(), which returns this strategy while the guard lives; kept
  // so that a TensorFlow program translates line by line.
  class scope_guard {
   public:
    scope_guard(const scope_guard&) = delete;
    scope_guard& operator=(const scope_guard&) = delete;
    ~scope_guard();

   private:
    friend class strategy;
    explicit scope_guard(const strategy* s);
    const strategy* previous_;
    const gradient_options* previous_gradient_;
  };
  [[nodiscard]] scope_guard scope() const { return scope_guard(this); }

  // strategy.run(fn, args=(...)): fn called once on each replica of this process (one), with
  // this replica's context first when it takes one: fn(ctx, args...) or fn(args...). Returns
  // fn's result on this replica (TF's PerReplica value: one replica per process). The arguments
  // are per-replica values: arrays (alone, or in pairs as a distributed dataset gives them) must
  // have the same shape on every replica but for their first dimension, checked on every
  // process before fn runs (two all_gathers: their count, then their shapes). Inside fn a
  // data-parallel model's compute_loss_and_gradients and train_on_batch take this replica's rows.
  template <class F, class... Args>
  decltype(auto) run(F&& fn, Args&&... args) const {
    if (replicas_ > 1) {
      std::vector<std::uint64_t> shapes;
      (strategy_detail::add_shapes(shapes, args), ...);
      strategy_detail::require_same_shapes(shapes);
    }
    const replica_context ctx(replica_, replicas_);
    const strategy_detail::replica_guard in_replica;
    if constexpr (std::is_invocable_v<F, const replica_context&, Args...>)
      return std::forward<F>(fn)(ctx, std::forward<Args>(args)...);
    else
      return std::forward<F>(fn)(std::forward<Args>(args)...);
  }

  // strategy.reduce(op, per_replica_value, axis=None): the replicas' values summed or averaged,
  // on every process.
  [[nodiscard]] float reduce(reduce_op op, float value) const;
  [[nodiscard]] double reduce(reduce_op op, double value) const;
  [[nodiscard]] std::vector<float> reduce(reduce_op op, std::vector<float> value) const;
  [[nodiscard]] array<float> reduce(reduce_op op, array<float> value) const;

  // strategy.gather(per_replica_value, axis=0): the replicas' arrays concatenated along their
  // first dimension, in replica order, on every process (the other dimensions must agree).
  [[nodiscard]] array<float> gather(const array<float>& value, int axis = 0) const;

  // strategy.experimental_local_results(value): this process's replicas' values.
  template <class T>
  [[nodiscard]] std::vector<T> experimental_local_results(T value) const {
    std::vector<T> out;
    out.push_back(std::move(value));
    return out;
  }

  // strategy.experimental_distribute_dataset(ds, options): `ds` batched with the global batch
  // size, shared out by auto_shard_policy:
  // - file: `ds` reads files (dataset::from_files); each replica opens only files
  //   replica, replica + replicas, ..., and its batches are its part of the global batch size
  //   (10 over 4 replicas: 3, 3, 2, 2), from its own files. The replicas end each pass together,
  //   at the first one's end. Needs at least one file per replica.
  // - data: each replica iterates its rows of every global batch (every replica reads all).
  // - auto (the default): file when `ds` reads at least one file per replica, else data.
  // - off, or auto_shard_dataset false (Keras 3's): `ds` is taken as this replica's own data,
  //   and each of its batches as a per-replica batch.
  template <class X, class Y>
  [[nodiscard]] distributed_dataset<X, Y> experimental_distribute_dataset(
      dataset<X, Y> ds, distribute_options options = {}) const {
    const auto policy = options.auto_shard_policy;
    if (policy == auto_shard_policy::file && ds.file_count() == 0) data::unshardable_by_file();
    if (!auto_shard_dataset || policy == auto_shard_policy::off)
      return distributed_dataset<X, Y>(std::move(ds), 0, 1);
    const auto replicas = static_cast<std::size_t>(replicas_);
    if (policy == auto_shard_policy::file ||
        (policy == auto_shard_policy::auto_ && ds.file_count() >= replicas))
      return distributed_dataset<X, Y>(ds.shard_files(replicas, static_cast<std::size_t>(replica_)),
                                       replica_, replicas_, true);
    return distributed_dataset<X, Y>(std::move(ds), replica_, replicas_);
  }
  // strategy.distribute_datasets_from_function(fn): fn(input_context) builds this process's
  // dataset (batched with the per-replica batch size, sharded as it chooses).
  template <class F>
  [[nodiscard]] auto distribute_datasets_from_function(F&& fn) const {
    return std::forward<F>(fn)(input_context{replicas_, replica_, replicas_});
  }

  // tf.nn.compute_average_loss(per_example_loss, global_batch_size=None): the sum of this
  // replica's per-example losses over the global batch size, so that the replicas' gradients
  // sum to the gradient of the global batch's mean. Without a global batch size it is this
  // replica's examples times the replicas (TF's default).
  [[nodiscard]] float compute_average_loss(
      std::span<const float> per_example_loss,
      std::optional<std::size_t> global_batch_size = std::nullopt) const;

  // Keras 3's names on a distribution (and tessel::num_model_replicas<Dist>() and the others for
  // any distribution type, runtime/process_mesh.hpp).
  [[nodiscard]] int num_processes() const noexcept { return processes_; }
  [[nodiscard]] int num_model_replicas() const noexcept { return replicas_; }
  [[nodiscard]] int num_data_shards() const noexcept { return replicas_; }
  [[nodiscard]] int data_shard_id() const noexcept { return replica_; }
  bool auto_shard_dataset = true;

  strategy(const strategy&) = delete;
  strategy& operator=(const strategy&) = delete;

 protected:
  // `local`: each process trains its model alone (one replica in sync).
  strategy(std::string name, bool local);
  // The communication options of a multi-worker strategy: the scope's gradient options and the
  // collective timeout.
  void communicate(const communication_options& o);
  // Prints TF's line from process 0: "INFO:tensorflow:Using MirroredStrategy with devices
  // ('/job:localhost/replica:0/task:0/device:CPU:0', ...)"; for a worker, the cluster too
  // (TF_CONFIG's, when the program has one).
  void announce(const std::string& job, const tf_config* cluster = nullptr) const;

 private:
  std::string name_;
  int processes_ = 1, replicas_ = 1, replica_ = 0;
  std::optional<gradient_options> gradient_;  // set by communication_options.bytes_per_pack
  communication_implementation implementation_ = communication_implementation::auto_;
};

// tf.distribute.MirroredStrategy: one replica per process on one machine, the variables mirrored
// on each, the gradients reduced every step as `Ops` says (TF's cross_device_ops): by default
// one all-reduce (MPI's; NCCL's on GPUs), or tessel::reduction_to_one_device (a reduce to the
// first process, then a broadcast of the sum).
template <class Mesh = device_mesh<axis<"batch">>,
          cross_device_ops Ops = cross_device_ops::all_reduce>
struct mirrored_strategy : data_parallel<Mesh>, strategy {
  static constexpr distribution_value value = [] {
    distribution_value v = data_parallel<Mesh>::value;
    v.reduction = Ops;
    return v;
  }();
  mirrored_strategy() : strategy("MirroredStrategy", false) { announce("localhost"); }
};

// tf.distribute.experimental.CentralStorageStrategy: the variables and the optimizer state on one
// process (the batch axis's coordinate `ParameterDevice`, TF's parameter_device), the model
// replicated for computing. Each step the replicas' gradients are reduced to that process (TF's
// ReductionToOneDevice), which applies the update once and broadcasts the variables; the others
// hold no optimizer state. It moves more bytes than mirrored_strategy (explain() lists them).
template <class Mesh = device_mesh<axis<"batch">>, int ParameterDevice = 0>
struct central_storage_strategy : data_parallel<Mesh>, strategy {
  static_assert(require<(ParameterDevice >= 0 && ParameterDevice < 256 &&
                         (Mesh::value.sizes[0] == dynamic_extent ||
                          static_cast<std::size_t>(ParameterDevice) < Mesh::value.sizes[0])),
                        diagnostic::parameter_device_not_in_mesh<ParameterDevice, Mesh>>);
  static constexpr distribution_value value = [] {
    distribution_value v = data_parallel<Mesh>::value;
    v.variable_device = ParameterDevice;
    return v;
  }();
  central_storage_strategy() : strategy("CentralStorageStrategy", false) {
    if (ParameterDevice >= num_processes())
      throw value_error("central_storage_strategy: the parameter device is process " +
                        std::to_string(ParameterDevice) + ", but the job has " +
                        std::to_string(num_processes()) + " processes; launch at least " +
                        std::to_string(ParameterDevice + 1) +
                        " processes (mpiexec -n), or name a parameter device below " +
                        std::to_string(num_processes()));
    announce("localhost");
  }
  // The process that holds the variables (TF's parameter_device).
  static constexpr int parameter_device = ParameterDevice;
};

// tf.distribute.MultiWorkerMirroredStrategy: the same across machines, one worker per process of
// the job (the MPI launcher's hostfile or Slurm says where they run). TF_CONFIG, where set, is
// read and checked against the launcher (parse_tf_config). communication_options as TF's.
template <class Mesh = device_mesh<axis<"batch">>>
struct multi_worker_mirrored_strategy : data_parallel<Mesh>, strategy {
  explicit multi_worker_mirrored_strategy(communication_options options = {})
      : strategy("MultiWorkerMirroredStrategy", false) {
    communicate(options);
    const char* text = std::getenv("TF_CONFIG");
    if (text != nullptr && *text != '\0') {
      cluster = parse_tf_config(text, num_processes(), replica_id());
      announce("worker", &*cluster);
    } else {
      announce("worker");
    }
  }
  // TF_CONFIG's cluster, when the program was given one.
  std::optional<tf_config> cluster;
};

// tf.distribute.OneDeviceStrategy: the model whole on this process's device; under mpiexec each
// process trains its own, nothing is communicated.
struct one_device_strategy : one_device, strategy {
  one_device_strategy() : strategy("OneDeviceStrategy", true) { announce("localhost"); }
};

// tf.distribute's default strategy: what a model without a distribution has (one replica).
class default_strategy : public one_device, public strategy {
 public:
  default_strategy() : strategy("_DefaultDistributionStrategy", true) {}
};

// tf.distribute.get_strategy(): the strategy whose scope is open on this thread, else the
// default strategy.
[[nodiscard]] TESSEL_INLINE const strategy& get_strategy();

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace strategy_detail {
inline thread_local const strategy* current = nullptr;
TESSEL_INLINE comm::communicator& replicas_group() { return runtime::world(); }
// The replicas' values summed (or averaged), on every process.
template <class T>
T reduce_scalar(reduce_op op, T value, int replicas) {
  if (replicas > 1) replicas_group().all_reduce(std::span<T>(&value, 1));
  return op == reduce_op::mean ? value / static_cast<T>(replicas) : value;
}
// The same element-wise. Every replica must hold as many values: checked first, so that a
// mismatch is an error on every process instead of a collective of different sizes.
TESSEL_INLINE std::vector<float> reduce_values(const char* what, reduce_op op,
                                               std::vector<float> value, int replicas) {
  if (replicas > 1) {
    std::uint64_t sizes[2] = {value.size(), ~std::uint64_t{value.size()}};
    replicas_group().all_reduce(std::span<std::uint64_t>(sizes), comm::reduce_op::max);
    if (sizes[0] != value.size() || ~sizes[1] != value.size())
      throw value_error(std::string(what) + ": the replicas hold values of different sizes (" +
                        std::to_string(~sizes[1]) + " to " + std::to_string(sizes[0]) +
                        ", this replica " + std::to_string(value.size()) +
                        "); reduce values of one shape on every replica");
    replicas_group().all_reduce(std::span<float>(value));
  }
  if (op == reduce_op::mean)
    for (float& v : value) v /= static_cast<float>(replicas);
  return value;
}
}  // namespace strategy_detail

TESSEL_INLINE std::size_t input_context::get_per_replica_batch_size(
    std::size_t global_batch_size) const {
  const auto n = static_cast<std::size_t>(num_replicas_in_sync);
  if (global_batch_size == 0)
    throw value_error("get_per_replica_batch_size: a global batch of 0 samples gives each of the " +
                      std::to_string(num_replicas_in_sync) +
                      " replicas a per-replica batch of 0; give a global batch of at least " +
                      std::to_string(num_replicas_in_sync) + " samples (one per replica)");
  if (n == 0 || global_batch_size % n != 0)
    throw value_error("The `global_batch_size` " + std::to_string(global_batch_size) +
                      " is not divisible by `num_replicas_in_sync` " +
                      std::to_string(num_replicas_in_sync) +
                      ". Choose a global batch size that is a multiple of the replicas.");
  return global_batch_size / n;
}

TESSEL_INLINE void strategy_detail::require_same_shapes(const std::vector<std::uint64_t>& words) {
  auto& group = replicas_group();
  const auto n = static_cast<std::size_t>(group.size());
  const std::uint64_t mine = words.size();
  std::vector<std::uint64_t> counts(n);
  group.all_gather(std::span<const std::uint64_t>(&mine, 1), std::span<std::uint64_t>(counts));
  for (std::size_t r = 0; r < n; ++r)
    if (counts[r] != mine)
      throw value_error("strategy.run: replica " + std::to_string(r) + " passes " +
                        std::to_string(counts[r] / max_shape_words) +
                        " array arguments, this replica " + std::to_string(mine / max_shape_words) +
                        "; call run with the same arguments on every replica");
  std::vector<std::uint64_t> all(n * words.size());
  group.all_gather(std::span<const std::uint64_t>(words), std::span<std::uint64_t>(all));
  const auto text = [](const std::uint64_t* w) {
    std::string s = "(batch";
    for (std::uint64_t d = 1; d < w[1] && d < max_shape_words - 1; ++d)
      s += ", " + std::to_string(w[d + 1]);
    return s + ")";
  };
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t a = 0; a < words.size(); a += max_shape_words)
      if (!std::equal(words.begin() + static_cast<std::ptrdiff_t>(a),
                      words.begin() + static_cast<std::ptrdiff_t>(a + max_shape_words),
                      all.begin() + static_cast<std::ptrdiff_t>(r * words.size() + a)))
        throw value_error("strategy.run: array argument " + std::to_string(a / max_shape_words) +
                          " has shape " + text(words.data() + a) + " on this replica but " +
                          text(all.data() + r * words.size() + a) + " on replica " +
                          std::to_string(r) +
                          "; per-replica values must agree in every dimension but the batch");
}

TESSEL_INLINE bool strategy_detail::every_replica_has_next(bool mine) {
  auto& group = replicas_group();
  const auto n = static_cast<std::size_t>(group.size());
  const std::uint8_t has = mine ? 1 : 0;
  std::vector<std::uint8_t> all(n);
  group.all_gather(std::span<const std::uint8_t>(&has, 1), std::span<std::uint8_t>(all));
  std::string ended, more;
  std::size_t ended_count = 0;
  for (std::size_t r = 0; r < n; ++r) {
    std::string& list = all[r] ? more : ended;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
    ended_count += all[r] ? 0 : 1;
  }
  if (ended.empty()) return true;
  if (!more.empty() && group.rank() == 0)
    std::cerr << "UserWarning: experimental_distribute_dataset: "
              << (ended_count == 1 ? "replica " : "replicas ") << ended << " read all of "
              << (ended_count == 1 ? "its" : "their") << " files while "
              << (n - ended_count == 1 ? "replica " : "replicas ") << more
              << " had more batches; every replica ends this pass here, and those batches are "
                 "not trained on this pass (give each replica files of equal size, or repeat() "
                 "the dataset and pass steps)\n";
  return false;
}

TESSEL_INLINE void strategy::communicate(const communication_options& o) {
  if (o.bytes_per_pack > 0)
    gradient_ = gradient_options{.bucket_cap_mb = static_cast<double>(o.bytes_per_pack) / 1e6};
  if (o.timeout_seconds) {
    if (!(*o.timeout_seconds > 0))
      throw value_error(
          "communication_options: timeout_seconds must be a positive number of "
          "seconds, got " +
          std::to_string(*o.timeout_seconds));
    set_collective_timeout(std::chrono::duration<double>(*o.timeout_seconds));
  }
  implementation_ = o.implementation;
  if (o.implementation == communication_implementation::nccl &&
      !list_devices().front().starts_with("gpu"))
    throw value_error(
        "communication_options: CommunicationImplementation.NCCL needs GPUs, and "
        "this process has none; use communication_implementation::auto_ or ring");
}

TESSEL_INLINE strategy::strategy(std::string name, bool local) : name_(std::move(name)) {
  runtime::require_started("building a " + name_);
  processes_ = tessel::num_processes();
  replicas_ = local ? 1 : processes_;
  replica_ = local ? 0 : tessel::process_id();
}

TESSEL_INLINE tf_config parse_tf_config(std::string_view text, int processes, int process) {
  using json = nlohmann::json;
  const auto fail = [](const std::string& what) {
    throw value_error("TF_CONFIG: " + what +
                      ". Give each process {\"cluster\": {\"worker\": [\"host:port\", ...]}, "
                      "\"task\": {\"type\": \"worker\", \"index\": i}}, or leave TF_CONFIG "
                      "unset: the MPI launcher says where the workers run");
  };
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("the value is not a JSON object");
  if (!j.contains("cluster") || !j["cluster"].is_object())
    fail("'cluster' is missing or not an object");
  tf_config c;
  std::vector<std::string> seen;
  for (const auto& [role, addresses] : j["cluster"].items()) {
    if (role != "chief" && role != "worker")
      fail("the cluster has '" + role +
           "' tasks; MultiWorkerMirroredStrategy trains with a "
           "chief and workers only (the parameter servers' strategy is another)");
    if (!addresses.is_array()) fail("'cluster." + role + "' is not a list of addresses");
    for (const auto& a : addresses) {
      if (!a.is_string())
        fail("'cluster." + role + "' holds " + a.dump() +
             ", which is not an address \"host:port\"");
      const std::string address = a.get<std::string>();
      if (const auto [parsed, why] = runtime::parse_address(address); !parsed)
        fail("'cluster." + role + "' holds \"" + address + "\", which is not an address " +
             "\"host:port\": " + why);
      if (std::find(seen.begin(), seen.end(), address) != seen.end())
        fail("the address '" + address + "' is listed twice");
      seen.push_back(address);
      (role == "chief" ? c.chief : c.worker).push_back(address);
    }
  }
  if (c.chief.size() > 1) fail("'cluster.chief' lists more than one address");
  if (c.chief.empty() && c.worker.empty()) fail("the cluster lists no worker");
  if (!j.contains("task") || !j["task"].is_object()) fail("'task' is missing or not an object");
  const json& task = j["task"];
  if (!task.contains("type") || !task["type"].is_string())
    fail("'task.type' is missing or not a string");
  c.task_type = task["type"].get<std::string>();
  if (c.task_type != "chief" && c.task_type != "worker")
    fail("'task.type' is '" + c.task_type +
         "'; a MultiWorkerMirroredStrategy process is a "
         "'worker' or the 'chief'");
  const auto& listed = c.task_type == "chief" ? c.chief : c.worker;
  if (!task.contains("index") || !task["index"].is_number_integer() ||
      task["index"].get<std::int64_t>() < 0 ||
      task["index"].get<std::int64_t>() >= static_cast<std::int64_t>(listed.size()))
    fail("'task.index' is missing, or not an index into 'cluster." + c.task_type + "' (" +
         std::to_string(listed.size()) + " addresses)");
  c.task_index = static_cast<int>(task["index"].get<std::int64_t>());
  if (c.num_workers() != processes)
    throw value_error("TF_CONFIG lists " + std::to_string(c.num_workers()) +
                      " workers (cluster.chief and cluster.worker), but the MPI launcher started " +
                      std::to_string(processes) +
                      " processes, one per worker; launch as many "
                      "processes as TF_CONFIG lists workers, or leave TF_CONFIG unset");
  if (c.task_id() != process)
    throw value_error("TF_CONFIG says this process is " + c.task_type + " " +
                      std::to_string(c.task_index) + " (worker " + std::to_string(c.task_id()) +
                      " of " + std::to_string(c.num_workers()) +
                      "), but the MPI launcher made it process " + std::to_string(process) +
                      " of " + std::to_string(processes) +
                      "; give each process the TF_CONFIG of its own rank (the launcher numbers "
                      "the processes as its hostfile lists the hosts), or leave TF_CONFIG unset");
  return c;
}

TESSEL_INLINE void strategy::announce(const std::string& job, const tf_config* cluster) const {
  if (tessel::process_id() != 0) return;
  const std::vector<std::string> devices = list_devices();
  const std::string type = devices.front().starts_with("gpu") ? "GPU" : "CPU";
  std::string names;
  // A worker lists its own device (task 0: this process); one machine lists every replica's.
  const int shown = replicas_ == 1 || job == "worker" ? 1 : static_cast<int>(devices.size());
  for (int i = 0; i < shown; ++i) {
    const std::string where = job == "worker" ? "/job:worker/task:0/device:" + type + ":0"
                                              : "/job:localhost/replica:0/task:0/device:" + type +
                                                    ":" + std::to_string(i);
    names += (i == 0 ? "'" : ", '") + where + "'";
  }
  if (shown == 1) names += ",";  // a Python tuple of one
  if (name_ == "CentralStorageStrategy") {
    // TensorFlow's parameter-server strategy, on one machine.
    std::printf(
        "INFO:tensorflow:ParameterServerStrategy (CentralStorageStrategy if you are "
        "using a single machine) with compute_devices = (%s), variable_device = "
        "'/job:localhost/replica:0/task:0/device:%s:0'\n",
        names.c_str(), type.c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("INFO:tensorflow:Using %s with devices (%s)\n",
              name_ == "OneDeviceStrategy" ? "OneDeviceStrategy" : "MirroredStrategy",
              names.c_str());
  if (job == "worker") {
    // TensorFlow prints the ClusterSpec as a Python dict.
    std::string spec = "{";
    const auto list = [&](const char* role, const std::vector<std::string>& addresses) {
      if (addresses.empty()) return;
      spec += std::string(spec.size() > 1 ? ", '" : "'") + role + "': [";
      for (std::size_t i = 0; i < addresses.size(); ++i)
        spec += (i == 0 ? "'" : ", '") + addresses[i] + "'";
      spec += "]";
    };
    if (cluster != nullptr) {
      list("chief", cluster->chief);
      list("worker", cluster->worker);
    }
    spec += "}";
    std::printf(
        "INFO:tensorflow:MultiWorkerMirroredStrategy with cluster_spec = %s, task_type = "
        "'%s', task_id = %d, num_workers = %d, local_devices = (%s), communication = "
        "CommunicationImplementation.%s\n",
        spec.c_str(), cluster != nullptr ? cluster->task_type.c_str() : "worker",
        cluster != nullptr ? cluster->task_index : 0, processes_, names.c_str(),
        implementation_ == communication_implementation::ring   ? "RING"
        : implementation_ == communication_implementation::nccl ? "NCCL"
                                                                : "AUTO");
  }
  std::fflush(stdout);
}

TESSEL_INLINE strategy::scope_guard::scope_guard(const strategy* s)
    : previous_(strategy_detail::current), previous_gradient_(detail::strategy_scope.gradient) {
  strategy_detail::current = s;
  if (s->gradient_) detail::strategy_scope.gradient = &*s->gradient_;
}
TESSEL_INLINE strategy::scope_guard::~scope_guard() {
  strategy_detail::current = previous_;
  detail::strategy_scope.gradient = previous_gradient_;
}

TESSEL_INLINE float strategy::reduce(reduce_op op, float value) const {
  return strategy_detail::reduce_scalar(op, value, replicas_);
}
TESSEL_INLINE double strategy::reduce(reduce_op op, double value) const {
  return strategy_detail::reduce_scalar(op, value, replicas_);
}
TESSEL_INLINE std::vector<float> strategy::reduce(reduce_op op, std::vector<float> value) const {
  return strategy_detail::reduce_values("strategy.reduce", op, std::move(value), replicas_);
}
TESSEL_INLINE array<float> strategy::reduce(reduce_op op, array<float> value) const {
  value.values = reduce(op, std::move(value.values));
  return value;
}

TESSEL_INLINE array<float> strategy::gather(const array<float>& value, int axis) const {
  if (axis != 0)
    throw value_error("strategy.gather: axis " + std::to_string(axis) +
                      " is not supported; gather along axis 0 (the batch)");
  if (value.shape.empty())
    throw value_error("strategy.gather: a value of rank 0 has no axis 0; gather arrays");
  std::size_t row = 1;
  for (std::size_t d = 1; d < value.shape.size(); ++d) row *= value.shape[d];
  const auto n = static_cast<std::size_t>(replicas_);
  // Every replica's rows and row size, then the values padded to the most rows.
  std::vector<std::uint64_t> mine{value.shape[0], row}, all(2 * n);
  if (replicas_ > 1)
    strategy_detail::replicas_group().all_gather(std::span<const std::uint64_t>(mine),
                                                 std::span<std::uint64_t>(all));
  else
    all = mine;
  std::size_t most = 0, total = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (all[2 * r + 1] != row)
      throw value_error("strategy.gather: replica " + std::to_string(r) + " has rows of " +
                        std::to_string(all[2 * r + 1]) + " values, this one of " +
                        std::to_string(row) + "; only the gathered axis may differ");
    most = std::max<std::size_t>(most, all[2 * r]);
    total += all[2 * r];
  }
  std::vector<float> padded(most * row, 0.0f), gathered(n * most * row);
  std::copy(value.values.begin(), value.values.end(), padded.begin());
  if (replicas_ > 1)
    strategy_detail::replicas_group().all_gather(std::span<const float>(padded),
                                                 std::span<float>(gathered));
  else
    gathered = padded;
  array<float> out;
  out.shape = value.shape;
  out.shape[0] = total;
  out.values.reserve(total * row);
  for (std::size_t r = 0; r < n; ++r) {
    const auto first = gathered.begin() + static_cast<std::ptrdiff_t>(r * most * row);
    out.values.insert(out.values.end(), first,
                      first + static_cast<std::ptrdiff_t>(all[2 * r] * row));
  }
  return out;
}

TESSEL_INLINE float strategy::compute_average_loss(
    std::span<const float> per_example_loss, std::optional<std::size_t> global_batch_size) const {
  const std::size_t global = global_batch_size
                                 ? *global_batch_size
                                 : per_example_loss.size() * static_cast<std::size_t>(replicas_);
  if (global == 0)
    throw value_error(
        "compute_average_loss: the global batch size is 0; pass the number of "
        "examples of the global batch");
  double sum = 0;
  for (float l : per_example_loss) sum += l;
  return static_cast<float>(sum / static_cast<double>(global));
}

TESSEL_INLINE float replica_context::all_reduce(reduce_op op, float value) const {
  return strategy_detail::reduce_scalar(op, value, replicas_);
}
TESSEL_INLINE double replica_context::all_reduce(reduce_op op, double value) const {
  return strategy_detail::reduce_scalar(op, value, replicas_);
}
TESSEL_INLINE std::vector<float> replica_context::all_reduce(reduce_op op,
                                                             std::vector<float> value) const {
  return strategy_detail::reduce_values("replica_context.all_reduce", op, std::move(value),
                                        replicas_);
}
TESSEL_INLINE array<float> replica_context::all_reduce(reduce_op op, array<float> value) const {
  value.values = all_reduce(op, std::move(value.values));
  return value;
}

TESSEL_INLINE const strategy& get_strategy() {
  if (strategy_detail::current != nullptr) return *strategy_detail::current;
  static const default_strategy d;
  return d;
}
#endif

}  // namespace tessel
