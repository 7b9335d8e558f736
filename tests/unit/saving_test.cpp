// save_weights / load_weights: Keras 3's .weights.h5 files both ways (tests/golden/saving, written
// by scripts/golden/keras_saving.py), the round trip of weights and optimizer state, and every
// kind of damaged or foreign file as a clear error.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <tessel/saving/weights_file.hpp>
#include <tessel/tessel.hpp>
#include <thread>
#include <vector>

#include "golden.hpp"
#include "keras_models.hpp"
#include "test_helpers.hpp"

namespace {

using namespace tessel::layers;
using tessel::array;
using tessel::testing::message_of;
using tessel::testing::temp_dir;
using tessel::testing::golden::json;
using tessel::testing::golden::load;
using tessel::testing::golden::to_array;
using tessel::testing::golden::values;
namespace fs = std::filesystem;
namespace optimizers = tessel::optimizers;
namespace losses = tessel::losses;

namespace seed000 = tessel::testing::keras_models::seed000;
namespace seed001 = tessel::testing::keras_models::seed001;
namespace seed002 = tessel::testing::keras_models::seed002;
using tessel::testing::keras_models::golden_file;
namespace rmsprop_mlp {
using model = tessel::sequential<input<6>, dense<5, {.activation = "relu"}>,
                                 dense<4, {.activation = "tanh"}>, dense<3>>;
void compile(model& m) {
  m.compile(optimizers::rmsprop{.learning_rate = 0.01, .momentum = 0.5, .centered = true},
            losses::mean_squared_error{});
}
}  // namespace rmsprop_mlp


// Within `rel` of Keras's values, relative to their largest magnitude (at least 1): the outputs'
// scale. (Logits of seed 001's 1,296 terms summed in another order differ by some 1e-6 of
// themselves.)
void check_near(const std::vector<float>& a, const std::vector<float>& e, const std::string& what,
                double rel) {
  REQUIRE(a.size() == e.size());
  double scale = 1;
  for (float v : e) scale = std::max(scale, std::fabs(double(v)));
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(what << "[" << i << "]: tessel " << a[i] << ", Keras " << e[i]);
    REQUIRE(std::fabs(double(a[i]) - e[i]) <= rel * scale);
  }
}

template <class Model>
void train_like_keras(Model& m, const json& g) {
  m.train_on_batch(to_array(g["x1"]), to_array(g["y1"]));
  m.train_on_batch(to_array(g["x2"]), to_array(g["y2"]));
}

// Every value of the model and its optimizer, bitwise: the weights, then the optimizer's
// iteration count, learning rate and slots.
template <class Model>
std::vector<std::vector<float>> state_of(Model& m) {
  std::vector<std::vector<float>> out;
  for (const auto& w : m.get_weights()) out.push_back(w.values);
  for (const auto& v : m.get_optimizer().state()) {
    if (v.is_tensor())
      out.push_back(v.numpy());
    else if (v.dtype() == "int64")
      out.push_back({float(v.integer())});
    else
      out.push_back({float(v.real()), float(v.real() - double(float(v.real())))});
  }
  return out;
}

// Keras's file loads in tessel: the same predictions (1e-6) and, after one more step on the
// loaded optimizer state, the same again (1e-5: one step of float arithmetic in another order).
template <class Model>
void keras_file_loads(const std::string& name, void (*compile)(Model&)) {
  const json g = load("saving/" + name + ".json");
  Model m;
  compile(m);
  m.load_weights(golden_file(name + ".weights.h5"));
  CHECK(m.get_optimizer().iterations() == g["iterations"].get<std::size_t>());
  check_near(m.predict(to_array(g["x_eval"])).values, values(g["predictions"]),
             name + " predictions", 1e-6);
  if (g.contains("after_next_step")) {
    m.train_on_batch(to_array(g["x_next"]), to_array(g["y_next"]));
    check_near(m.predict(to_array(g["x_eval"])).values, values(g["after_next_step"]),
               name + " predictions after a step", 1e-5);
  }
}

// tessel's file loads in Keras: the Keras file, trained on the same two batches in tessel, saved
// (into TESSEL_SAVING_GOLDEN_OUT too, where set: the files keras_saving.py --from-tessel loads);
// Keras's predictions from that file are tessel's, and after one more step in each, again. Both
// within 1e-5: the state is tessel's training of two steps as it ran when the golden file was
// written, and a change to a kernel's summation order since moves its last bits (measured when
// written: 6e-7 of the outputs' scale, 5e-6 after the step).
template <class Model>
void tessel_file_loads_in_keras(const std::string& name, void (*compile)(Model&)) {
  const json g = load("saving/" + name + ".json");
  Model m;
  compile(m);
  m.load_weights(golden_file(name + ".weights.h5"));
  train_like_keras(m, g);
  temp_dir dir;
  m.save_weights((dir / (name + ".weights.h5")).string());
  if (const char* out = std::getenv("TESSEL_SAVING_GOLDEN_OUT"); out != nullptr && *out) {
    fs::create_directories(out);
    m.save_weights((fs::path(out) / (name + ".weights.h5")).string());
  }
  const json k = load("saving/keras_loads_tessel_" + name + ".json");
  CHECK(k["iterations"].get<std::size_t>() == m.get_optimizer().iterations());
  check_near(m.predict(to_array(g["x_eval"])).values, values(k["predictions"]),
             name + ": Keras's predictions from tessel's file", 1e-5);
  if (k.contains("after_next_step")) {
    m.train_on_batch(to_array(g["x_next"]), to_array(g["y_next"]));
    check_near(m.predict(to_array(g["x_eval"])).values, values(k["after_next_step"]),
               name + ": after a step in Keras from tessel's file", 1e-5);
  }
}

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// A small trained model under RMSprop saved to `path`; returns the state it saved.
std::vector<std::vector<float>> save_small(const fs::path& path) {
  const json g = load("saving/rmsprop_mlp.json");
  rmsprop_mlp::model m;
  rmsprop_mlp::compile(m);
  train_like_keras(m, g);
  m.save_weights(path.string());
  return state_of(m);
}

}  // namespace

TEST_CASE("saving: Keras's names for layer groups and the optimizer", "[saving]") {
  using tessel::saving::keras_snake_case;
  CHECK(keras_snake_case("Dense") == "dense");
  CHECK(keras_snake_case("Conv2D") == "conv2d");
  CHECK(keras_snake_case("GlobalAveragePooling2D") == "global_average_pooling2d");
  CHECK(keras_snake_case("BatchNormalization") == "batch_normalization");
  CHECK(keras_snake_case("ReLU") == "re_lu");
  CHECK(keras_snake_case("InputLayer") == "input_layer");
  CHECK(keras_snake_case("RMSprop") == "rm_sprop");
  CHECK(keras_snake_case("SGD") == "sgd");
  CHECK(tessel::saving::keras_unique_names({"dense", "re_lu", "dense", "re_lu", "dense"}) ==
        std::vector<std::string>{"dense", "re_lu", "dense_1", "re_lu_1", "dense_2"});
  // RMSprop's slots by kind in Keras's order (three passes); Adam's by variable, as tessel keeps
  // them (one pass); Adam's with amsgrad, the moments by variable, then every velocity_hat.
  CHECK(tessel::saving::keras_slot_order({0, 1, 2, 0, 1, 2}) ==
        std::vector<std::size_t>{0, 3, 1, 4, 2, 5});
  CHECK(tessel::saving::keras_slot_order({0, 0, 0, 0}) == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(tessel::saving::keras_slot_order({0, 0, 1, 0, 0, 1}) ==
        std::vector<std::size_t>{0, 1, 3, 4, 2, 5});
}

TEST_CASE("saving: tessel loads Keras's .weights.h5 files and predicts as Keras",
          "[saving][golden]") {
  SECTION("seeds/000") { keras_file_loads<seed000::model>("seed000", seed000::compile); }
  SECTION("seeds/001") { keras_file_loads<seed001::model>("seed001", seed001::compile); }
  SECTION("seeds/002") { keras_file_loads<seed002::model>("seed002", seed002::compile); }
  SECTION("RMSprop") { keras_file_loads<rmsprop_mlp::model>("rmsprop_mlp", rmsprop_mlp::compile); }
}

TEST_CASE("saving: Keras loads tessel's .weights.h5 files and predicts as tessel",
          "[saving][golden]") {
  SECTION("seeds/000") { tessel_file_loads_in_keras<seed000::model>("seed000", seed000::compile); }
  SECTION("seeds/001") { tessel_file_loads_in_keras<seed001::model>("seed001", seed001::compile); }
  SECTION("seeds/002") { tessel_file_loads_in_keras<seed002::model>("seed002", seed002::compile); }
  SECTION("RMSprop") {
    tessel_file_loads_in_keras<rmsprop_mlp::model>("rmsprop_mlp", rmsprop_mlp::compile);
  }
}

TEST_CASE(
    "saving: save then load gives back the weights and optimizer state bitwise, and "
    "training goes on as without the reload",
    "[saving]") {
  const json g = load("saving/seed002.json");
  seed002::model a;
  seed002::compile(a);
  a.load_weights(golden_file("seed002.weights.h5"));
  a.train_on_batch(to_array(g["x1"]), to_array(g["y1"]));
  temp_dir dir;
  const std::string path = (dir / "cnn.weights.h5").string();
  a.save_weights(path);
  seed002::model b;
  seed002::compile(b);
  b.load_weights(path);
  REQUIRE(state_of(b) == state_of(a));
  // Two more steps on each: the reloaded model ends where the other does, bit for bit.
  for (const char* k : {"2", "_next"}) {
    const std::string x = std::string("x") + k, y = std::string("y") + k;
    a.train_on_batch(to_array(g[x]), to_array(g[y]));
    b.train_on_batch(to_array(g[x]), to_array(g[y]));
  }
  CHECK(state_of(b) == state_of(a));
  // The file has no temporary left beside it.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);

  SECTION("RMSprop's slots, in Keras's order in the file, come back in tessel's") {
    const fs::path p = dir / "small.weights.h5";
    const auto saved = save_small(p);
    rmsprop_mlp::model c;
    rmsprop_mlp::compile(c);
    c.load_weights(p.string());
    CHECK(state_of(c) == saved);
  }
}

TEST_CASE("saving: a model without optimizer state saves and loads as Keras does", "[saving]") {
  temp_dir dir;
  const json g = load("saving/rmsprop_mlp.json");
  SECTION("a model that is not compiled writes no optimizer, and loads only the weights") {
    rmsprop_mlp::model m;
    m.save_weights((dir / "a.weights.h5").string());
    rmsprop_mlp::model n;
    rmsprop_mlp::compile(n);
    train_like_keras(n, g);
    n.load_weights((dir / "a.weights.h5").string());  // the optimizer keeps its state
    CHECK(n.get_weights()[0].values == m.get_weights()[0].values);
    CHECK(n.get_optimizer().iterations() == 2);
    rmsprop_mlp::model u;  // not compiled: the file's optimizer is left aside
    u.load_weights(golden_file("rmsprop_mlp.weights.h5"));
  }
  SECTION("a compiled model before its first step writes the counters alone") {
    rmsprop_mlp::model m;
    rmsprop_mlp::compile(m);
    m.save_weights((dir / "b.weights.h5").string());
    rmsprop_mlp::model n;
    rmsprop_mlp::compile(n);
    train_like_keras(n, g);
    n.load_weights((dir / "b.weights.h5").string());
    CHECK(n.get_optimizer().iterations() == 0);
  }
}

TEST_CASE("saving: model_checkpoint writes .weights.h5 files through save_weights", "[saving]") {
  temp_dir dir;
  const json g = load("saving/rmsprop_mlp.json");
  rmsprop_mlp::model m;
  rmsprop_mlp::compile(m);
  const std::string pattern = (dir / "ckpt-{epoch:02d}.weights.h5").string();
  m.fit(to_array(g["x1"]), to_array(g["y1"]),
        {.batch_size = 4,
         .epochs = 2,
         .verbose = 0,
         .callbacks = {tessel::callbacks::model_checkpoint(
             {.filepath = pattern, .save_weights_only = true})},
         .shuffle = false});
  rmsprop_mlp::model n;
  rmsprop_mlp::compile(n);
  n.load_weights((dir / "ckpt-02.weights.h5").string());
  CHECK(state_of(n) == state_of(m));
  CHECK(fs::exists(dir / "ckpt-01.weights.h5"));
}

TEST_CASE("saving: damaged and foreign files are clear errors, never a crash", "[saving]") {
  temp_dir dir;
  const fs::path good = dir / "good.weights.h5";
  const auto saved = save_small(good);
  const std::vector<char> bytes = read_bytes(good);
  auto load_into_fresh = [](const fs::path& p) {
    return message_of([&] {
      rmsprop_mlp::model m;
      rmsprop_mlp::compile(m);
      m.load_weights(p.string());
    });
  };
  using Catch::Matchers::Contains;

  SECTION("a missing file, an empty one, one that is not HDF5, another suffix") {
    CHECK_THAT(load_into_fresh(dir / "none.weights.h5"), Contains("does not exist"));
    write_bytes(dir / "empty.weights.h5", {});
    CHECK_THAT(load_into_fresh(dir / "empty.weights.h5"), Contains("empty (0 bytes)"));
    const std::string text = "a text file, not a weights file\n";
    write_bytes(dir / "text.weights.h5", {text.begin(), text.end()});
    CHECK_THAT(load_into_fresh(dir / "text.weights.h5"), Contains("not an HDF5 file"));
    CHECK_THAT(load_into_fresh(dir / "good.h5"), Contains("must end in `.weights.h5`"));
    rmsprop_mlp::model m;
    CHECK_THAT(message_of([&] { m.save_weights((dir / "m.keras").string()); }),
               Contains("must end in `.weights.h5`"));
  }
  SECTION("a truncated file") {
    // Cut into the HDF5 content: named as truncated (its superblock says where it ends).
    const std::size_t content = bytes.size() - tessel::saving::checksum_trailer_size;
    for (std::size_t keep : {content - 1, bytes.size() / 2, std::size_t{100}, std::size_t{10}}) {
      write_bytes(dir / "cut.weights.h5", {bytes.begin(), bytes.begin() + keep});
      INFO("kept " << keep << " of " << bytes.size() << " bytes");
      CHECK_THAT(load_into_fresh(dir / "cut.weights.h5"), Contains("truncated"));
    }
    // Cut into the checksum's trailer only: the content is whole, and loads.
    write_bytes(dir / "cut.weights.h5", {bytes.begin(), bytes.end() - 1});
    rmsprop_mlp::model m;
    rmsprop_mlp::compile(m);
    m.load_weights((dir / "cut.weights.h5").string());
    CHECK(state_of(m) == saved);
  }
  SECTION("a Keras file (superblock version 0) cut inside its superblock") {
    // Its size of offsets is byte 13: a file of 12 or 13 bytes was handed to libhdf5.
    const std::vector<char> keras = read_bytes(golden_file("rmsprop_mlp.weights.h5"));
    REQUIRE(keras[8] == 0);
    for (std::size_t keep : {std::size_t{12}, std::size_t{13}, std::size_t{14}, std::size_t{47}}) {
      write_bytes(dir / "cut.weights.h5", {keras.begin(), keras.begin() + keep});
      INFO("kept " << keep << " bytes");
      CHECK_THROWS_WITH(tessel::saving::check_weights_file(dir / "cut.weights.h5", "load_weights"),
                        Contains("cut.weights.h5") && Contains("truncated"));
    }
  }
  SECTION("a superblock whose base and end-of-file addresses add up past 2^64") {
    // Version 0, 8-byte offsets: the base address at byte 24, the end of file at 40. Their sum
    // wrapped around to 16, within the file, and the file went to libhdf5.
    std::vector<char> keras = read_bytes(golden_file("rmsprop_mlp.weights.h5"));
    REQUIRE(keras[13] == 8);
    for (int i = 0; i < 8; ++i) keras[24 + i] = static_cast<char>(i == 0 ? 0xf0 : 0xff);
    for (int i = 0; i < 8; ++i) keras[40 + i] = static_cast<char>(i == 0 ? 0x20 : 0x00);
    write_bytes(dir / "wrapped.weights.h5", keras);
    CHECK_THROWS_WITH(
        tessel::saving::check_weights_file(dir / "wrapped.weights.h5", "load_weights"),
        Contains("wrapped.weights.h5") && Contains("ends at byte 2^64 or later"));
  }
  SECTION("flipped bytes in a variable's values fail its checksum") {
    rmsprop_mlp::model m;
    rmsprop_mlp::compile(m);
    m.load_weights(good.string());
    const std::vector<float> kernel = m.get_weights()[2].values;  // dense_1/kernel
    const char* k = reinterpret_cast<const char*>(kernel.data());
    const auto at = std::search(bytes.begin(), bytes.end(), k, k + kernel.size() * sizeof(float));
    REQUIRE(at != bytes.end());
    std::vector<char> damaged = bytes;
    damaged[static_cast<std::size_t>(at - bytes.begin()) + 5] ^= 0x10;
    write_bytes(dir / "flip.weights.h5", damaged);
    CHECK_THAT(load_into_fresh(dir / "flip.weights.h5"),
               Contains("damaged after tessel wrote it") && Contains("CRC-32"));
    // Without the file's trailer (a tool that copies the HDF5 content), the dataset's own
    // checksum names the variable.
    damaged.erase(damaged.end() - tessel::saving::checksum_trailer_size, damaged.end());
    write_bytes(dir / "flip.weights.h5", damaged);
    CHECK_THAT(load_into_fresh(dir / "flip.weights.h5"),
               Contains("dense_1/kernel") && Contains("checksum tessel recorded"));
  }
  SECTION("a flipped byte anywhere: a clear error, or (in bytes nothing reads) the same state") {
    std::size_t errors = 0, same = 0;
    for (std::size_t i = 0; i < bytes.size(); i += 7) {
      std::vector<char> damaged = bytes;
      damaged[i] ^= 0x5a;
      write_bytes(dir / "flip.weights.h5", damaged);
      rmsprop_mlp::model m;
      rmsprop_mlp::compile(m);
      try {
        m.load_weights((dir / "flip.weights.h5").string());
      } catch (const tessel::value_error&) {
        ++errors;
        continue;
      }
      INFO("byte " << i << " flipped, and the file loaded");
      REQUIRE(state_of(m) == saved);
      ++same;
    }
    INFO(errors << " errors, " << same << " loads of the same state");
    CHECK(errors > 0);
  }
  SECTION("libhdf5's failures are tessel errors with its words, and it prints nothing") {
    // Without the trailer, a byte of the superblock flipped (its checksum then fails in libhdf5).
    std::vector<char> damaged(bytes.begin(), bytes.end() - tessel::saving::checksum_trailer_size);
    damaged[20] ^= 0x01;
    write_bytes(dir / "superblock.weights.h5", damaged);
    std::fflush(stderr);
    const int saved_stderr = ::dup(2);
    const fs::path err = dir / "stderr.txt";
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    const std::string msg = load_into_fresh(dir / "superblock.weights.h5");
    std::fflush(stderr);
    ::dup2(saved_stderr, 2);
    ::close(fd);
    ::close(saved_stderr);
    CHECK_THAT(msg, Contains("libhdf5 cannot open it") && Contains("(libhdf5: "));
    CHECK(fs::file_size(err) == 0);
  }
  SECTION("a file of another model names the layer or variable") {
    CHECK_THAT(load_into_fresh(golden_file("seed001.weights.h5")),
               Contains("another model") && Contains("dense"));
    using wider = tessel::sequential<input<6>, dense<7, {.activation = "relu"}>,
                                     dense<4, {.activation = "tanh"}>, dense<3>>;
    wider w;
    CHECK_THAT(message_of([&] { w.load_weights(good.string()); }),
               Contains("'dense/kernel' has shape (6, 7) in this model, but (6, 5) in the file"));
    using more = tessel::sequential<input<6>, dense<5, {.activation = "relu"}>,
                                    dense<4, {.activation = "tanh"}>, dense<3>, dense<3>>;
    more x;
    CHECK_THAT(message_of([&] { x.load_weights(good.string()); }),
               Contains("no weights for layer 'dense_3' (group 'layers/dense_3')"));
    using fewer = tessel::sequential<input<6>, dense<5, {.activation = "relu"}>, dense<3>>;
    fewer y;
    CHECK_THAT(message_of([&] { y.load_weights(good.string()); }),
               Contains("shape") || Contains("which this model does not have"));
  }
  SECTION("a missing variable, and the state of another optimizer") {
    namespace h5 = tessel::saving::h5;
    {
      h5::object f = h5::create_file((dir / "missing.weights.h5").string());
      const h5::object layers = h5::create_group(f, "layers");
      const std::vector<float> w(30, 0.5f), b(5, 0.0f);
      const h5::object v = h5::create_group(h5::create_group(layers, "dense"), "vars");
      h5::write_dataset(v, "0", {6, 5}, w);
      h5::write_dataset(v, "2", {5}, b);  // "1" (the bias) missing
    }
    CHECK_THAT(load_into_fresh(dir / "missing.weights.h5"),
               Contains("no variable 1 of layer 'dense'") && Contains("'dense/bias'"));
    rmsprop_mlp::model a;
    a.compile(optimizers::adam{}, losses::mean_squared_error{});
    CHECK_THAT(message_of([&] { a.load_weights(good.string()); }),
               Contains("optimizer 'rm_sprop'") && Contains("compiled with 'adam'"));
  }
  SECTION("a failed write leaves the file it would replace as it was") {
    fs::create_directory(tessel::saving::temporary_path(good));  // where the write would go
    rmsprop_mlp::model m;
    std::string what = "no exception";
    try {
      m.save_weights(good.string());
    } catch (const tessel::runtime_error& e) {  // the system's failure, in its words
      what = e.what();
    }
    CHECK_THAT(what, Contains("Cannot write the weights file") && Contains("Is a directory"));
    CHECK(fs::is_directory(tessel::saving::temporary_path(good)));  // not tessel's: left there
    fs::remove(tessel::saving::temporary_path(good));
    CHECK(read_bytes(good) == bytes);
    CHECK_THAT(message_of([&] { m.save_weights((dir / "no/such/dir.weights.h5").string()); }),
               Contains("does not exist"));
  }
}

TEST_CASE("saving: a weights file's writer waits for each variable's values, and stops when "
          "they will not come",
          "[saving]") {
  // save_weights on several processes writes on a thread while the variables are gathered.
  tessel::saving::detail::taken_count taken;
  std::atomic<bool> reached{false};
  std::thread writer([&] {
    taken.wait_for(2);
    reached = true;
  });
  taken.add();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!reached);  // one of the two it waits for
  taken.add();
  writer.join();
  CHECK(reached);

  tessel::saving::detail::taken_count abandoned;
  std::string message;
  std::thread waiting([&] {
    try {
      abandoned.wait_for(1);
    } catch (const tessel::runtime_error& e) {
      message = e.what();
    }
  });
  abandoned.abandon();
  waiting.join();
  CHECK(message.find("were not gathered") != std::string::npos);
}
