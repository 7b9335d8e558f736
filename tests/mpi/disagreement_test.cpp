// Processes that do not feed the same global data stream, or do not make the same calls, under a
// distribution: one case per run (argv[1]); the last process differs from the others. Each must
// end the job with one message, from process 0, naming what differs and on which processes, and
// exit code 1 on every process: never an MPI error, a crash or a hang.
//   samples        fit on 64 samples, 96 on the last process (data_parallel)
//   shuffle-seed   a dataset shuffled with seed 1, 2 on the last process
//   batch-size     batch(8), batch(16) on the last process
//   loss           compiled with a different loss on the last process
//   loss-argument  binary cross-entropy on logits, on probabilities on the last process
//   call           the last process calls evaluate where the others call fit
//   predict        predict on 40 rows, 48 on the last process
//   custom-loop    train_on_batch on a batch of 8, 16 on the last process
//   model-parallel fit on 64 samples, 96 on the last process, on a 2x2 model_parallel mesh
//   same           every process alike: trains, and prints "disagreement_test: agreed"
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>

namespace {
using namespace tessel::layers;
using dp_t = tessel::sequential<tessel::data_parallel<>, input<4>, dense<8, {.name = "d1"}>,
                                dense<3, {.name = "d2"}>>;
using mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 2>>;
using mp_t = tessel::sequential<
    tessel::model_parallel<tessel::layout_map<mesh, tessel::rule<"d1/kernel", tessel::none, "model">>,
                           "data">,
    input<4>, dense<8, {.name = "d1"}>, dense<3, {.name = "d2"}>>;

tessel::array<float> features(std::size_t n) {
  tessel::array<float> x({n, 4});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 5) * 0.25f;
  return x;
}
tessel::array<std::int32_t> labels(std::size_t n) {
  tessel::array<std::int32_t> y({n});
  for (std::size_t i = 0; i < n; ++i) y.values[i] = static_cast<std::int32_t>(i % 3);
  return y;
}
template <class Model>
void compile(Model& m, bool other_loss = false) {
  if (other_loss)
    m.compile("sgd", tessel::losses::sparse_categorical_crossentropy{});
  else
    m.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
}

int run(const std::string& mode) {
  const bool last = tessel::process_id() == tessel::num_processes() - 1;
  const std::size_t n = last && (mode == "samples" || mode == "model-parallel") ? 96 : 64;
  if (mode == "model-parallel") {
    mp_t m;
    compile(m);
    m.fit(features(n), labels(n), {.batch_size = 8, .epochs = 1, .verbose = 0});
    return 0;
  }
  dp_t m;
  compile(m, last && mode == "loss");
  if (mode == "loss-argument") {
    m.compile("sgd", tessel::losses::binary_crossentropy{.from_logits = !last});
    tessel::array<float> y({n, 3});
    m.fit(features(n), y, {.batch_size = 8, .epochs = 1, .verbose = 0});
    return 0;
  }
  if (mode == "shuffle-seed" || mode == "batch-size") {
    const auto ds = tessel::from_tensor_slices(features(n), labels(n))
                        .shuffle(64, last && mode == "shuffle-seed" ? 2 : 1)
                        .batch(last && mode == "batch-size" ? 16 : 8);
    m.fit(ds, {.epochs = 1, .verbose = 0});
    return 0;
  }
  if (mode == "call" && last) {
    m.evaluate(features(n), labels(n), 8, 0);
    return 0;
  }
  if (mode == "predict") {
    m.predict(features(last ? 48 : 40), 8);
    return 0;
  }
  if (mode == "custom-loop") {
    const std::size_t b = last ? 16 : 8;
    m.train_on_batch(features(b), labels(b));
    return 0;
  }
  m.fit(features(n), labels(n), {.batch_size = 8, .epochs = 1, .verbose = 0});
  if (tessel::process_id() == 0) std::printf("disagreement_test: agreed\n");
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    return run(argc > 1 ? argv[1] : "same");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
}
