// Model-parallel training equals one device: seeds/000's ModelParallel program (d1's kernel split
// by columns over "model", its output laid out ("data", None) at d2) on the 8-device meshes 8x1,
// 4x2, 2x4 and 1x8 and on a 2x2x2 mesh with d1 split over two axes; a Megatron pair (column-
// then row-parallel) on 2x4, 4x2, 8x1 and 1x8 (and on 2x2 when run on 4 processes); and
// classifiers whose class dimension stays split across "model" (vocab-parallel softmax, cross-
// entropies on logits and on probabilities, squared error, accuracy), each trained for 20 steps
// (RMSprop, and Adam; dropout) against the same model on one device: losses, metrics, every
// weight (gathered by get_weights), predictions and evaluate. The collectives a further step ran
// are the plan's, with their bytes, and communication_stats() counts them by kind and mesh axis.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <tessel/tessel.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::rel;
constexpr double tolerance = 1e-5;
// Adam's weights: where a gradient cancels to the size of epsilon (1e-7), Adam's update
// g / (|g| + eps) turns the gradient's rounding (a different summation order: each device sums
// its rows, then the devices' sums are added) into up to 1 / (4 eps) times as much change. The
// seeds/000 model on 2x4 measures about 1e-5 (1.03e-5 after 20 steps, 1.15e-5 after 10);
// RMSprop stays within 1e-6 here.
constexpr double adam_weight_tolerance = 5e-5;
constexpr std::size_t batch = 16, steps = 20;

template <std::size_t D, std::size_t M>
using seed_map = layout_map<device_mesh<axis<"data", D>, axis<"model", M>>,
                           rule<"d1/kernel", none, "model">, rule<"d1/bias", "model">,
                           rule<"d2/output", "data", none>>;
template <class Dist>
using seed_model =
    sequential<Dist, input<28, 28, 1>, flatten<>,
               dense<200, {.activation = "relu", .use_bias = false, .name = "d1"}>, dropout<0.4>,
               dense<10, {.activation = "softmax", .name = "d2"}>>;

// A 3-D mesh: the batch over "data", d1's columns over two model axes at once (one dimension
// split 4 ways by "m1" then "m2"), d2's kernel rows over "m2".
using mesh_3d = device_mesh<axis<"data", 2>, axis<"m1", 2>, axis<"m2", 2>>;
using map_3d = layout_map<mesh_3d, rule<"d1/kernel", none, axes<"m1", "m2">>,
                          rule<"d2/kernel", "m2", none>, rule<"d2/output", "data", none>>;

using megatron_map = layout_map<device_mesh<axis<"data", 2>, axis<"model", 4>>,
                                rule<"col/kernel", none, "model">, rule<"col/bias", "model">,
                                rule<"row/kernel", "model", none>>;
template <class Dist>
using megatron_model =
    sequential<Dist, input<32>, dense<64, {.activation = "relu", .name = "col"}>,
               dense<16, {.activation = "tanh", .name = "row"}>,
               dense<4, {.activation = "softmax", .name = "head"}>>;

template <std::size_t D, std::size_t M>
using megatron_map_of = layout_map<device_mesh<axis<"data", D>, axis<"model", M>>,
                                   rule<"col/kernel", none, "model">, rule<"col/bias", "model">,
                                   rule<"row/kernel", "model", none>>;

// The Megatron pair after a replicated layer, whose input gradient the pair must return: one
// all_reduce over "model" forward (the row-parallel layer's partial output) and one backward (the
// column-parallel layer's partial input gradient), and nothing else over "model".
template <class Dist>
using megatron_block = sequential<Dist, input<32>, dense<32, {.activation = "relu", .name = "pre"}>,
                                  dense<64, {.activation = "relu", .name = "col"}>,
                                  dense<32, {.name = "row"}>,
                                  dense<4, {.activation = "softmax", .name = "head"}>>;
void check_megatron_collectives(const array<float>& x, const array<float>& y) {
  megatron_block<model_parallel<megatron_map, "data">> m;
  m.compile({.loss = "categorical_crossentropy"});
  m.reset_communication_stats();
  m.train_on_batch(data::slice_rows(x, 0, batch), data::slice_rows(y, 0, batch));
  const communication_stats st = m.communication_stats();
  const std::size_t over_model = st.count(collective::all_reduce, "model");
  check(over_model == 2 && st.total_collectives() == st.count(collective::all_reduce, "data") + 2,
        "a Megatron pair runs one all_reduce over 'model' forward and one backward, got " +
            std::to_string(over_model) + " of " + std::to_string(st.total_collectives()));
  const model_plan& p = m.plan();
  const auto model_axis = static_cast<int>(p.mesh.index_of("model"));
  check(p.collectives(phase::forward, collective::all_reduce, model_axis) == 1 &&
            p.collectives(phase::backward, collective::all_reduce, model_axis) == 1,
        "the plan lists them: one forward, one backward");
}

// A collective outside a dense layer: the relu's output gathered over "model" by a layout_map
// rule (the model reshards around the relu's local computation).
using relu_gather_map = layout_map<device_mesh<axis<"data", 2>, axis<"model", 4>>,
                                   rule<"a/kernel", none, "model">, rule<"a/bias", "model">,
                                   rule<"r/output", "data", none>>;
template <class Dist>
using relu_gather_model = sequential<Dist, input<32>, dense<32, {.name = "a"}>, relu<"r">,
                                     dense<4, {.activation = "softmax", .name = "head"}>>;

// A fixed synthetic data set: inputs in [0, 1), one-hot targets.
struct data_set {
  array<float> x;
  array<float> y;
};
data_set make_data(std::size_t n, std::size_t features, std::size_t classes) {
  data_set d{array<float>({n, features}), array<float>({n, classes})};
  random::stream s(5, 9);
  for (std::size_t i = 0; i < d.x.size(); ++i) d.x.values[i] = s.uniform(i);
  for (std::size_t r = 0; r < n; ++r)
    d.y.values[r * classes + static_cast<std::size_t>(s.uniform(d.x.size() + r) * classes) %
                                 classes] = 1.0f;
  return d;
}

// The class index of each one-hot row.
array<std::int32_t> argmax_labels(const array<float>& y) {
  array<std::int32_t> labels({y.rows()});
  const std::size_t classes = y.size() / y.rows();
  for (std::size_t r = 0; r < y.rows(); ++r)
    for (std::size_t j = 0; j < classes; ++j)
      if (y.values[r * classes + j] == 1.0f) labels.values[r] = static_cast<std::int32_t>(j);
  return labels;
}

// A classifier whose class dimension stays split across "model" (no output rule): the softmax,
// the loss and the accuracy reduce rows (row max, row sum, target terms, arg-max).
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
using split_map = layout_map<mesh_2x4, rule<"h/kernel", none, "model">,
                             rule<"c/kernel", none, "model">, rule<"c/bias", "model">>;
template <class Dist>
using split_softmax_model =
    sequential<Dist, input<32>, dense<16, {.activation = "relu", .name = "h"}>, dropout<0.25>,
               dense<8, {.activation = "softmax", .name = "c"}>>;
template <class Dist>
using split_logits_model = sequential<Dist, input<32>, dense<16, {.activation = "relu", .name = "h"}>,
                                      dense<8, {.name = "c"}>>;
// A Softmax layer after the split logits: the model runs it on its block with row reductions.
template <class Dist>
using split_softmax_layer_model =
    sequential<Dist, input<32>, dense<16, {.activation = "relu", .name = "h"}>,
               dense<8, {.name = "c"}>, softmax<"s">>;
// The classes split over two axes at once on a 2x2x2 mesh.
using split_map_3d = layout_map<mesh_3d, rule<"h/kernel", none, "m1">,
                                rule<"c/kernel", none, axes<"m1", "m2">>,
                                rule<"c/bias", axes<"m1", "m2">>>;

template <class Sharded, class Single, class Y>
void compare(const char* what, const array<float>& x_all, const array<Y>& y_all,
             const char* optimizer = "rmsprop", loss_spec loss = "mse") {
  Sharded sharded;
  Single single;
  sharded.compile({.optimizer = optimizer, .loss = loss, .metrics = {"accuracy"}});
  single.compile({.optimizer = optimizer, .loss = loss, .metrics = {"accuracy"}});
  std::string name(what);
  check(sharded.get_weights() == single.get_weights(), name + ": the same initial weights");
  double worst_loss = 0, worst_metric = 0;
  for (std::size_t step = 0; step < steps; ++step) {
    const std::size_t first = (step * batch) % (x_all.rows() - batch + 1);
    const array<float> x = data::slice_rows(x_all, first, first + batch);
    const array<Y> y = data::slice_rows(y_all, first, first + batch);
    const logs a = sharded.train_on_batch(x, y), b = single.train_on_batch(x, y);
    worst_loss = std::max(worst_loss, rel(*find_log(a, "loss"), *find_log(b, "loss")));
    worst_metric = std::max(worst_metric, rel(*find_log(a, "accuracy"), *find_log(b, "accuracy")));
  }
  const auto wa = sharded.get_weights(), wb = single.get_weights();
  double worst_weight = 0;
  check(wa.size() == wb.size(), name + ": as many variables");
  for (std::size_t i = 0; i < wa.size() && i < wb.size(); ++i)
    worst_weight = std::max(worst_weight, rel(wa[i].values, wb[i].values));
  const array<float> xt = data::slice_rows(x_all, 0, 32);
  const array<Y> yt = data::slice_rows(y_all, 0, 32);
  const double worst_prediction =
      rel(sharded.predict(xt, 16).values, single.predict(xt, 16).values);
  const logs ea = sharded.evaluate(xt, yt, 16, 0), eb = single.evaluate(xt, yt, 16, 0);
  const double worst_evaluate = rel(*find_log(ea, "loss"), *find_log(eb, "loss"));
  check(worst_loss <= tolerance, name + ": losses " + std::to_string(worst_loss));
  check(worst_metric <= tolerance, name + ": accuracy " + std::to_string(worst_metric));
  const double weight_tolerance =
      std::string(optimizer) == "adam" ? adam_weight_tolerance : tolerance;
  check(worst_weight <= weight_tolerance, name + ": weights " + std::to_string(worst_weight));
  check(worst_prediction <= tolerance, name + ": predictions " + std::to_string(worst_prediction));
  check(worst_evaluate <= tolerance, name + ": evaluate " + std::to_string(worst_evaluate));

  // One more step, its collectives against the plan's with their bytes (in buckets of one
  // gradient each, so that each gradient's all_reduce is one collective as planned; the buckets
  // start as the backward pass reaches them, so the order differs), and counted by kind and axis.
  sharded.set_gradient_options({.bucket_cap_mb = 1e-6});
  sharded.clear_collectives();
  sharded.reset_communication_stats();
  sharded.train_on_batch(data::slice_rows(x_all, 0, batch), data::slice_rows(y_all, 0, batch));
  model_desc d = Sharded::describe(loss.plan_kind(), 4);
  d.argmax_metrics = true;
  const model_plan p = plan_model(Sharded::distribution::value, sharded.mesh().shape(), d, batch);
  std::vector<collective_record> planned;
  for (const auto& s : p)
    if (s.step.kind != collective::slice) planned.push_back(record_of(s.step));
  std::vector<collective_record> ran = sharded.collectives().records;
  const auto order = [](const collective_record& a, const collective_record& b) {
    return std::tuple(a.kind, a.axis, a.dim, a.to_dim, a.bytes) <
           std::tuple(b.kind, b.axis, b.dim, b.to_dim, b.bytes);
  };
  std::sort(ran.begin(), ran.end(), order);
  std::sort(planned.begin(), planned.end(), order);
  const communication_stats stats = sharded.communication_stats();
  bool counts_match = true;
  for (const auto& c : stats.collectives) {
    std::size_t n = 0, bytes = 0;
    for (const auto& s : p)
      if (s.step.kind == c.kind && p.mesh.names[s.step.axis].view() == c.axis)
        n += 1, bytes += s.step.bytes;
    counts_match = counts_match && n == c.count && bytes == c.bytes;
  }
  check(counts_match && stats.total_collectives() == planned.size(),
        name + ": communication_stats counts the plan's collectives by kind and axis");
  check(ran == planned, name + ": the collectives run (" + std::to_string(ran.size()) +
                            ") are the plan's (" + std::to_string(planned.size()) + ")");
  if (process_id() == 0 && ran != planned) {
    for (const auto& r : ran)
      std::printf("  ran %s axis %d dim %d bytes %zu\n", std::string(name_of(r.kind)).c_str(),
                  r.axis, r.dim, r.bytes);
    for (const auto& s : p)
      std::printf("  planned %s %s bytes %zu\n", step_name(p, s).c_str(),
                  to_string(s.step, p.mesh).c_str(), s.step.bytes);
  }
  if (process_id() == 0)
    std::printf("%s: worst relative difference from one device: loss %.2e, accuracy %.2e, "
                "weights %.2e, predictions %.2e, evaluate %.2e; %zu collectives per step as "
                "planned, %zu gradients reduced in buckets\n",
                what, worst_loss, worst_metric, worst_weight, worst_prediction, worst_evaluate,
                planned.size(), stats.buckets);
}
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    if (num_processes() == 4) {  // the 4-device meshes: the Megatron pair on 2x2
      const data_set pairs = make_data(64, 32, 4);
      compare<megatron_model<model_parallel<megatron_map_of<2, 2>, "data">>,
              megatron_model<one_device>>("Megatron pair on 2x2", pairs.x, pairs.y, "adam");
      return tessel::testing::finish("model_parallel_test");
    }
    const data_set images = make_data(64, 784, 10);
    const array<float> x_images = data::reshape(images.x, {64, 28, 28, 1});
    using single_seed = seed_model<one_device>;
    compare<seed_model<model_parallel<seed_map<8, 1>, "data">>, single_seed>("seeds/000 on 8x1",
                                                                           x_images, images.y);
    compare<seed_model<model_parallel<seed_map<4, 2>, "data">>, single_seed>("seeds/000 on 4x2",
                                                                           x_images, images.y);
    compare<seed_model<model_parallel<seed_map<2, 4>, "data">>, single_seed>("seeds/000 on 2x4",
                                                                           x_images, images.y);
    compare<seed_model<model_parallel<seed_map<1, 8>, "data">>, single_seed>("seeds/000 on 1x8",
                                                                           x_images, images.y);
    compare<seed_model<model_parallel<seed_map<2, 4>, "data">>, single_seed>(
        "seeds/000 on 2x4 with Adam", x_images, images.y, "adam");
    compare<seed_model<model_parallel<map_3d, "data">>, single_seed>(
        "seeds/000 on 2x2x2, d1 over two axes", x_images, images.y);
    // What is refused, with what to do: a global batch the batch axis does not divide, call(),
    // which runs on one process, and set_weights with a wrong shape.
    {
      seed_model<model_parallel<seed_map<2, 4>, "data">> m;
      m.compile({.loss = "mse"});
      const array<float> odd_x = data::slice_rows(x_images, 0, 15);
      const array<float> odd_y = data::slice_rows(images.y, 0, 15);
      std::string message;
      try {
        m.train_on_batch(odd_x, odd_y);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("The global batch size (15) is not divisible by the size of the batch "
                         "axis 'data' (2) under model_parallel") != std::string::npos,
            "a batch of 15 on 2x4 is refused: " + message);
      message.clear();
      try {
        m.call(odd_x);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("Use predict(x)") != std::string::npos, "call() is refused: " + message);
      message.clear();
      std::vector<array<float>> wrong = m.get_weights();
      wrong[0].values.resize(3);
      try {
        m.set_weights(wrong);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("Variable 'd1/kernel' has 156800 values; cannot assign 3.") !=
                std::string::npos,
            "set_weights with a wrong shape is refused: " + message);
      // A transposed kernel: the right number of values, the wrong shape. Refused on every
      // process before anything is broadcast, as Keras refuses it.
      message.clear();
      std::vector<array<float>> transposed = m.get_weights();
      transposed[0] = array<float>({200, 784}, transposed[0].values);
      try {
        m.set_weights(transposed);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("Layer sequential weight shape (784, 200) is not compatible with "
                         "provided weight shape (200, 784). The variable is 'd1/kernel' "
                         "(weights[0])") != std::string::npos,
            "set_weights with a transposed kernel is refused: " + message);
      // Given on process 0 only: every process refuses, none waits in a broadcast.
      message.clear();
      std::vector<array<float>> on_one = m.get_weights();
      if (process_id() == 0) on_one[0] = transposed[0];
      try {
        m.set_weights(on_one);
      } catch (const std::exception& e) {
        message = e.what();
      }
      check(message.find(process_id() == 0
                             ? "is not compatible with provided weight shape"
                             : "set_weights failed on 1 other process") != std::string::npos,
            "a transposed kernel on process 0 only is refused on every process: " + message);
      seed_model<model_parallel<seed_map<2, 4>, "data">> fresh;
      check(m.get_weights() == fresh.get_weights(),
            "the refused calls leave the weights as they were");
      // set_weights takes global values; each process keeps its block (a round trip).
      std::vector<array<float>> shifted = fresh.get_weights();
      for (auto& w : shifted)
        for (float& v : w) v += 0.25f;
      m.set_weights(shifted);
      check(m.get_weights() == shifted, "set_weights then get_weights gives the values back");
    }
    const data_set pairs = make_data(64, 32, 4);
    compare<megatron_model<model_parallel<megatron_map, "data">>, megatron_model<one_device>>(
        "Megatron pair on 2x4", pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map_of<1, 8>, "data">>,
            megatron_model<one_device>>("Megatron pair on 1x8", pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map_of<4, 2>, "data">>,
            megatron_model<one_device>>("Megatron pair on 4x2", pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map_of<8, 1>, "data">>,
            megatron_model<one_device>>("Megatron pair on 8x1", pairs.x, pairs.y);
    check_megatron_collectives(pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map, "data">>, megatron_model<one_device>>(
        "Megatron pair on 2x4 with Adam", pairs.x, pairs.y, "adam");
    compare<relu_gather_model<model_parallel<relu_gather_map, "data">>,
            relu_gather_model<one_device>>("relu's output gathered on 2x4", pairs.x, pairs.y);
    // Classes split across "model": the vocab-parallel softmax, losses and accuracy.
    const data_set classes = make_data(64, 32, 8);
    const array<std::int32_t> labels = argmax_labels(classes.y);
    using sharded_split = model_parallel<split_map, "data">;
    compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
        "softmax over split classes, squared error", classes.x, classes.y);
    compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
        "softmax over split classes, categorical_crossentropy", classes.x, classes.y, "adam",
        "categorical_crossentropy");
    compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
        "softmax over split classes, sparse_categorical_crossentropy", classes.x, labels,
        "rmsprop", "sparse_categorical_crossentropy");
    compare<split_logits_model<sharded_split>, split_logits_model<one_device>>(
        "split logits, sparse_categorical_crossentropy(from_logits)", classes.x, labels, "adam",
        losses::sparse_categorical_crossentropy{.from_logits = true});
    compare<split_logits_model<sharded_split>, split_logits_model<one_device>>(
        "split logits, categorical_crossentropy(from_logits)", classes.x, classes.y, "rmsprop",
        losses::categorical_crossentropy{.from_logits = true});
    compare<split_softmax_layer_model<sharded_split>, split_softmax_layer_model<one_device>>(
        "a Softmax layer over split classes", classes.x, labels, "rmsprop",
        "sparse_categorical_crossentropy");
    compare<split_softmax_model<model_parallel<split_map_3d, "data">>,
            split_softmax_model<one_device>>("classes split over two axes on 2x2x2", classes.x,
                                             labels, "rmsprop", "sparse_categorical_crossentropy");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("model_parallel_test");
}
