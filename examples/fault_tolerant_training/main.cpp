// seeds/001's fault tolerance under tf.distribute.MirroredStrategy: "make or restore the model".
// Each run makes the strategy, opens its scope, restores the newest checkpoint in ./ckpt if there
// is one (the whole model as a `.keras` archive: its weights and its optimizer's state), else
// makes a new model; then trains, saving a checkpoint at the end of every epoch with
// model_checkpoint. Run it twice: the second run goes on from the first one's last epoch.
//
//   Input(784) -> Dense(256, relu) -> Dense(256, relu) -> Dense(10) logits on Fashion-MNIST,
//   Adam, sparse categorical crossentropy from logits, sparse categorical accuracy, batch 32,
//   validation on the last 10,000 training images.
//
//   [mpiexec -n N] fault_tolerant_training [--epochs N] [--checkpoint-dir DIR] [--steps N]
//
// The seed restores with keras.models.load_model; the model is a C++ type here, so the archive is
// loaded into a model of that type (load_weights). For a restart that goes on mid-epoch, bit for
// bit, use callbacks::backup_and_restore instead (docs/distributed.md).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tessel/tessel.hpp>

namespace {

using namespace tessel::layers;
using model_t =
    tessel::sequential<tessel::mirrored_strategy<>, input<784>, dense<256, {.activation = "relu"}>,
                       dense<256, {.activation = "relu"}>, dense<10>>;

// seeds/001's get_compiled_model().
void compile(model_t& model) {
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
}

// seeds/001's make_or_restore_model(): the newest checkpoint if there is one.
void make_or_restore_model(model_t& model, const std::string& checkpoint_dir) {
  const bool chief = tessel::process_id() == 0;
  compile(model);
  const std::filesystem::path latest = tessel::latest_checkpoint(checkpoint_dir);
  if (!latest.empty()) {
    if (chief) std::printf("Restoring from %s\n", latest.string().c_str());
    model.load_weights(latest.string());
    return;
  }
  if (chief) std::printf("Creating a new model\n");
}

int run(int argc, char** argv) {
  std::size_t epochs = 1, steps = 0;
  std::string checkpoint_dir = "./ckpt";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--checkpoint-dir") == 0) checkpoint_dir = argv[++i];
    else if (std::strcmp(argv[i], "--steps") == 0) steps = std::strtoul(argv[++i], nullptr, 10);
  }
  // The checkpoint directory, made by the process that writes into it.
  if (tessel::process_id() == 0) std::filesystem::create_directories(checkpoint_dir);

  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto prepare = [](const tessel::array<std::uint8_t>& images) {
    return tessel::data::reshape(tessel::data::to_float(images, 1.0f / 255.0f),
                                 {images.shape[0], 784});
  };
  const tessel::array<float> x_all = prepare(train.first);
  const auto y_all = tessel::data::to_int32(train.second);
  constexpr std::size_t num_val_samples = 10000, batch_size = 32;
  // --steps limits the batches of an epoch (a quick run); 0: all of them.
  const std::size_t n_train =
      steps > 0 ? std::min(steps * batch_size, x_all.rows() - num_val_samples)
                : x_all.rows() - num_val_samples;
  const auto train_ds = tessel::from_tensor_slices(tessel::data::slice_rows(x_all, 0, n_train),
                                                   tessel::data::slice_rows(y_all, 0, n_train))
                            .shuffle(static_cast<std::int64_t>(n_train))
                            .batch(batch_size);
  const std::size_t v0 = x_all.rows() - num_val_samples;
  const auto val_ds = tessel::from_tensor_slices(tessel::data::slice_rows(x_all, v0, x_all.rows()),
                                                 tessel::data::slice_rows(y_all, v0, y_all.rows()))
                          .batch(batch_size);

  // seeds/001's run_training(): the strategy, its scope, the model made or restored in it.
  tessel::mirrored_strategy<> strategy;
  const auto scope = strategy.scope();
  model_t model;
  make_or_restore_model(model, checkpoint_dir);
  model.fit(train_ds, {.epochs = epochs,
                       .verbose = 2,
                       .callbacks = {tessel::callbacks::model_checkpoint(
                           {.filepath = checkpoint_dir + "/ckpt-{epoch}.keras"})},
                       .validation_data = val_ds});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (process %d): %s\n", tessel::process_id(), e.what());
    return 1;
  }
}
