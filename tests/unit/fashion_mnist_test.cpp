// Fashion-MNIST: the real files of Debian's dataset-fashion-mnist (the project installs the package
// before the tests run, so a missing dataset fails here), and the directory and error rules on
// small files written for the test.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <tessel/data/array_ops.hpp>
#include <tessel/data/dataset.hpp>
#include <tessel/data/fashion_mnist.hpp>
#include <tessel/data/idx.hpp>
#include <vector>

using Catch::Matchers::Contains;
using tessel::array;
using tessel::value_error;
using shape_t = std::vector<std::size_t>;
namespace fs = std::filesystem;
namespace fashion_mnist = tessel::datasets::fashion_mnist;

namespace {

using tessel::testing::message_of;
using tessel::testing::temp_dir;



// Sets (or unsets) TESSEL_FASHION_MNIST_DIR for one test and puts the old value back.
struct scoped_env {
  std::optional<std::string> old;
  explicit scoped_env(const std::optional<std::string>& value) {
    if (const char* v = std::getenv(fashion_mnist::directory_variable)) old = v;
    set(value);
  }
  ~scoped_env() { set(old); }
  static void set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(fashion_mnist::directory_variable, value->c_str(), 1);
    } else {
      ::unsetenv(fashion_mnist::directory_variable);
    }
  }
};

// A small stand-in for the dataset: n images whose pixels all equal their label, as the four files
// (gzip'd, or plain where asked).
void write_fake(const fs::path& dir, std::size_t n_train, std::size_t n_test, bool gzip = true) {
  const std::string ext = gzip ? ".gz" : "";
  for (const auto& [prefix, n] : {std::pair{"train", n_train}, std::pair{"t10k", n_test}}) {
    array<std::uint8_t> images({n, 28, 28});
    array<std::uint8_t> labels({n});
    for (std::size_t i = 0; i < n; ++i) {
      labels.values[i] = static_cast<std::uint8_t>(i % 10);
      std::fill_n(images.values.begin() + static_cast<std::ptrdiff_t>(i * 784), 784,
                  labels.values[i]);
    }
    tessel::data::write_idx(dir / (std::string(prefix) + "-images-idx3-ubyte" + ext), images);
    tessel::data::write_idx(dir / (std::string(prefix) + "-labels-idx1-ubyte" + ext), labels);
  }
}

// The real dataset, read once for all the tests that use it.
const std::pair<fashion_mnist::split, fashion_mnist::split>& real_data() {
  static const auto data = fashion_mnist::load_data();
  return data;
}

std::uint64_t sum(const array<std::uint8_t>& a) {
  return std::accumulate(a.values.begin(), a.values.end(), std::uint64_t{0});
}

std::array<std::size_t, 10> counts(const array<std::uint8_t>& labels) {
  std::array<std::size_t, 10> c{};
  for (const auto v : labels.values) ++c[v];
  return c;
}

}  // namespace

TEST_CASE("data: Fashion-MNIST loads with Keras's shapes, labels and pixels",
          "[data][fashion_mnist]") {
  // Fails, with the install hint, when the dataset is not installed.
  REQUIRE_NOTHROW(real_data());
  const auto& [train, test] = real_data();
  const auto& [x_train, y_train] = train;
  const auto& [x_test, y_test] = test;
  CHECK(x_train.shape == shape_t{60000, 28, 28});
  CHECK(y_train.shape == shape_t{60000});
  CHECK(x_test.shape == shape_t{10000, 28, 28});
  CHECK(y_test.shape == shape_t{10000});

  // The first labels keras.datasets.fashion_mnist.load_data() gives, and balanced classes.
  CHECK(std::vector<int>(y_train.values.begin(), y_train.values.begin() + 10) ==
        std::vector<int>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  CHECK(std::vector<int>(y_test.values.begin(), y_test.values.begin() + 10) ==
        std::vector<int>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  for (const auto c : counts(y_train)) CHECK(c == 6000);
  for (const auto c : counts(y_test)) CHECK(c == 1000);
  CHECK(std::string(fashion_mnist::class_names[y_train.values[0]]) == "Ankle boot");

  // Pixel sums as checksums (the train mean is the well-known 0.2860 after / 255).
  CHECK(sum(x_train) == 3431114169u);
  CHECK(sum(x_test) == 573469082u);
  CHECK(sum(tessel::data::slice_rows(x_train, 0, 1)) == 76247u);
  CHECK(static_cast<double>(sum(x_train)) / (255.0 * 60000 * 784) == Approx(0.2860).margin(1e-4));
}

TEST_CASE("data: Fashion-MNIST becomes a training dataset as in the Keras tutorial",
          "[data][fashion_mnist]") {
  REQUIRE_NOTHROW(real_data());
  auto [train, test] = real_data();
  auto [x_train, y_train] = train;
  // x_train.reshape(-1, 784).astype("float32") / 255; y_train.astype("int32")
  auto x = tessel::data::reshape(tessel::data::to_float(x_train, 1.0f / 255),
                                 {tessel::data::infer_dim, 784});
  auto y = tessel::data::to_int32(y_train);
  CHECK(x.shape == shape_t{60000, 784});
  CHECK(*std::max_element(x.values.begin(), x.values.end()) == 1.0f);
  CHECK(tessel::data::to_categorical(y_train, 10).shape == shape_t{60000, 10});

  const auto ds = tessel::from_tensor_slices(std::move(x), std::move(y))
                      .shuffle(60000, 1)
                      .batch(32)
                      .prefetch(2);
  CHECK(ds.cardinality() == 1875u);
  std::size_t batches = 0;
  std::size_t wrong_shapes = 0;
  std::array<std::size_t, 10> seen{};
  for (const auto& [xb, yb] : ds) {
    ++batches;
    wrong_shapes += xb.shape != shape_t{32, 784} || yb.shape != shape_t{32};
    for (const auto v : yb.values) ++seen[static_cast<std::size_t>(v)];
  }
  CHECK(batches == 1875);
  CHECK(wrong_shapes == 0);
  for (const auto c : seen) CHECK(c == 6000);
}

TEST_CASE(
    "data: missing Fashion-MNIST files name the file, the package and "
    "the variable",
    "[data][fashion_mnist][error]") {
  temp_dir dir;
  write_fake(dir.path, 3, 2);
  fs::remove(dir.path / "t10k-images-idx3-ubyte.gz");
  const auto msg = message_of([&] { fashion_mnist::load_data(dir.path); });
  CHECK_THAT(msg, Contains("'" + (dir.path / "t10k-images-idx3-ubyte.gz").string() + "'") &&
                      Contains("was not found") && Contains("the directory passed to load_data") &&
                      Contains("apt-get install dataset-fashion-mnist") &&
                      Contains("TESSEL_FASHION_MNIST_DIR"));
  CHECK_THAT(msg, !Contains("train-images-idx3-ubyte.gz'"));

  const scoped_env env(dir.path.string() + "/nowhere");
  CHECK_THAT(message_of([] { fashion_mnist::load_data(); }),
             Contains("files '") && Contains("nowhere/train-images-idx3-ubyte.gz'") &&
                 Contains("from $TESSEL_FASHION_MNIST_DIR") && Contains("which does not exist") &&
                 Contains("apt-get install dataset-fashion-mnist"));
}

TEST_CASE(
    "data: the argument, then TESSEL_FASHION_MNIST_DIR, then the Debian "
    "path choose the directory",
    "[data][fashion_mnist]") {
  temp_dir from_env, from_arg;
  write_fake(from_env.path, 5, 3);
  write_fake(from_arg.path, 4, 2, false);  // uncompressed files are read too
  {
    const scoped_env env(from_env.path.string());
    CHECK(fashion_mnist::data_directory() == from_env.path);
    auto [train, test] = fashion_mnist::load_data();
    CHECK(train.first.shape == shape_t{5, 28, 28});
    CHECK(test.second.shape == shape_t{3});
    CHECK(train.first.values[784 * 4] == 4);  // image 4 is all 4s

    auto [train2, test2] = fashion_mnist::load_data(from_arg.path);
    CHECK(train2.first.shape == shape_t{4, 28, 28});
    CHECK(test2.first.shape == shape_t{2, 28, 28});
  }
  const scoped_env unset(std::nullopt);
  CHECK(fashion_mnist::data_directory() == fs::path(fashion_mnist::default_directory));
  CHECK(fashion_mnist::data_directory("/x") == fs::path("/x"));
}

TEST_CASE("data: files that are not Fashion-MNIST are refused", "[data][fashion_mnist][error]") {
  temp_dir dir;
  write_fake(dir.path, 3, 2);
  SECTION("images of another size") {
    tessel::data::write_idx(dir.path / "train-images-idx3-ubyte.gz",
                            array<std::uint8_t>({3, 27, 27}));
    CHECK_THAT(message_of([&] { fashion_mnist::load_data(dir.path); }),
               Contains("train-images-idx3-ubyte.gz") && Contains("shape (3, 27, 27)") &&
                   Contains("expected (n, 28, 28)"));
  }
  SECTION("a label per image") {
    tessel::data::write_idx(dir.path / "t10k-labels-idx1-ubyte.gz", array<std::uint8_t>({5}));
    CHECK_THAT(message_of([&] { fashion_mnist::load_data(dir.path); }),
               Contains("t10k-labels-idx1-ubyte.gz") && Contains("shape (5,)") &&
                   Contains("expected (2,)"));
  }
  SECTION("labels in [0, 10)") {
    tessel::data::write_idx(dir.path / "train-labels-idx1-ubyte.gz",
                            array<std::uint8_t>({3}, {1, 12, 0}));
    CHECK_THAT(message_of([&] { fashion_mnist::load_data(dir.path); }),
               Contains("label 12 at index 1") && Contains("outside [0, 10)"));
  }
}

TEST_CASE("data: a Fashion-MNIST directory that is a file is named as such, not as missing",
          "[data][fashion_mnist][error]") {
  temp_dir dir;
  const fs::path file = dir / "fashion.tar";
  tessel::data::write_idx(file, array<std::uint8_t>({1}));
  {
    const scoped_env env(file.string());
    const auto msg = message_of([] { fashion_mnist::load_data(); });
    CHECK_THAT(msg, Contains("Fashion-MNIST directory '" + file.string() +
                             "' (from $TESSEL_FASHION_MNIST_DIR) is a regular file, not a "
                             "directory; set TESSEL_FASHION_MNIST_DIR to the directory that holds "
                             "train-images-idx3-ubyte.gz, "));
    CHECK_THAT(msg, !Contains("does not exist") && !Contains("not found") && !Contains("apt-get"));
  }
  // A directory below a file: the path cannot exist, and the message says which part is a file.
  const auto below = message_of([&] { fashion_mnist::load_data(file / "fashion-mnist"); });
  CHECK_THAT(below, Contains("Fashion-MNIST directory '" + (file / "fashion-mnist").string() +
                             "' (the directory passed to load_data) cannot be reached: Not a "
                             "directory ('" +
                             file.string() +
                             "' is a regular file, not a directory); pass the directory that "
                             "holds train-images-idx3-ubyte.gz, "));
  CHECK_THAT(below, !Contains("apt-get"));
  // A file of the dataset that is a directory.
  write_fake(dir.path, 2, 1);
  fs::remove(dir / "t10k-labels-idx1-ubyte.gz");
  fs::create_directory(dir / "t10k-labels-idx1-ubyte.gz");
  CHECK_THAT(message_of([&] { fashion_mnist::load_data(dir.path); }),
             Contains("Fashion-MNIST file '" + (dir / "t10k-labels-idx1-ubyte.gz").string() +
                      "' (in the directory passed to load_data) is a directory, not a file") &&
                 Contains("replace it with the IDX file") && !Contains("apt-get"));
}

TEST_CASE("data: a Fashion-MNIST directory this user may not read says permission denied",
          "[data][fashion_mnist][error]") {
  // Root reads every file whatever its permission bits: as_unprivileged_user checks as nobody.
  temp_dir dir;
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  const fs::path locked = dir / "locked";
  fs::create_directory(locked);
  write_fake(locked, 2, 1);
  fs::permissions(locked, fs::perms::none);
  // Files in a directory that may not be searched.
  const std::string in_locked = tessel::testing::as_unprivileged_user(
      [&] { return message_of([&] { fashion_mnist::load_data(locked); }); });
  // A directory inside one that may not be searched.
  const std::string below_locked = tessel::testing::as_unprivileged_user(
      [&] { return message_of([&] { fashion_mnist::load_data(locked / "inner"); }); });
  // A file of the dataset that may not be read, in a directory that may.
  fs::permissions(locked, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(locked / "train-labels-idx1-ubyte.gz", fs::perms::none);
  const std::string unreadable = tessel::testing::as_unprivileged_user(
      [&] { return message_of([&] { fashion_mnist::load_data(locked); }); });
  fs::permissions(locked, fs::perms::owner_all);

  CHECK_THAT(
      in_locked,
      Contains("Fashion-MNIST file '" + (locked / "train-images-idx3-ubyte.gz").string() +
               "' (in the directory passed to load_data) cannot be accessed: "
               "Permission denied (the user running this program may not "
               "search the directory '" +
               locked.string() + "'); change the permissions, or pass the directory that holds"));
  CHECK_THAT(below_locked,
             Contains("Fashion-MNIST directory '" + (locked / "inner").string() +
                      "' (the directory passed to load_data) cannot be accessed: Permission "
                      "denied (the user running this program may not search the directory '" +
                      locked.string() + "'); change its permissions"));
  CHECK_THAT(unreadable,
             Contains("cannot open IDX file '" + (locked / "train-labels-idx1-ubyte.gz").string() +
                      "': Permission denied (the user running this program may not "
                      "read it); change the permissions"));
  for (const auto& msg : {in_locked, below_locked, unreadable})
    CHECK_THAT(msg, !Contains("not found") && !Contains("does not exist") && !Contains("apt-get"));
}
