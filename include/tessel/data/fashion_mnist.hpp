#pragma once
// keras.datasets.fashion_mnist.load_data(), from the IDX files of Debian's dataset-fashion-mnist
// package (no download: the files are read where they are installed). Link with -lz.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "../core/errors.hpp"
#include "array.hpp"
#include "idx.hpp"

namespace tessel::datasets::fashion_mnist {

// Where Debian's dataset-fashion-mnist package installs the four files.
inline constexpr const char* default_directory = "/usr/share/datasets/fashion-mnist";
// Names another directory holding the four files; a directory passed to load_data wins over it.
inline constexpr const char* directory_variable = "TESSEL_FASHION_MNIST_DIR";

inline constexpr std::size_t num_classes = 10;
// Label i is class_names[i], as in the Keras documentation of the dataset.
inline constexpr const char* class_names[num_classes] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// (images, labels): uint8 images (n, 28, 28) with values 0..255 and uint8 labels (n,) in 0..9.
using split = std::pair<array<std::uint8_t>, array<std::uint8_t>>;

// The directory load_data reads: the argument if not empty, else $TESSEL_FASHION_MNIST_DIR if set
// and not empty, else default_directory.
inline std::filesystem::path data_directory(const std::filesystem::path& directory = {}) {
  if (!directory.empty()) return directory;
  if (const char* env = std::getenv(directory_variable); env != nullptr && *env != '\0') return env;
  return default_directory;
}

namespace detail {

inline constexpr const char* file_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

inline std::string install_hint() {
  std::string files;
  for (std::size_t i = 0; i < 4; ++i)
    files += std::string(i ? (i == 3 ? " and " : ", ") : "") + file_names[i] + ".gz";
  return std::string(
             "Install Debian's package with `apt-get install dataset-fashion-mnist`, or set ") +
         directory_variable + " to a directory that holds " + files;
}

// Shape and label range, checked so that a wrong file (MNIST digits' labels are fine, a random
// IDX file is not) fails here and not as a confusing error inside fit.
inline split load_split(const std::filesystem::path& images_path,
                        const std::filesystem::path& labels_path) {
  split s{data::read_idx(images_path), data::read_idx(labels_path)};
  const auto& [images, labels] = s;
  if (images.rank() != 3 || images.shape[1] != 28 || images.shape[2] != 28) {
    throw value_error("Fashion-MNIST images '" + images_path.string() + "' have shape " +
                      shape_to_string(images.shape) + ", expected (n, 28, 28); " + install_hint());
  }
  if (labels.rank() != 1 || labels.shape[0] != images.shape[0]) {
    throw value_error("Fashion-MNIST labels '" + labels_path.string() + "' have shape " +
                      shape_to_string(labels.shape) + ", expected (" +
                      std::to_string(images.shape[0]) + ",), one label per image of '" +
                      images_path.string() + "'");
  }
  for (std::size_t i = 0; i < labels.values.size(); ++i) {
    if (labels.values[i] >= num_classes) {
      throw value_error("Fashion-MNIST labels '" + labels_path.string() + "' hold label " +
                        std::to_string(labels.values[i]) + " at index " + std::to_string(i) +
                        ", outside [0, 10); the file is not Fashion-MNIST labels");
    }
  }
  return s;
}

}  // namespace detail

// ((x_train, y_train), (x_test, y_test)) as keras.datasets.fashion_mnist.load_data() returns them:
// x_train (60000, 28, 28), y_train (60000,), x_test (10000, 28, 28), y_test (10000,), all uint8.
// Reads NAME.gz, or NAME uncompressed, from data_directory(directory). A missing file throws
// value_error naming it, the package to install and the environment variable.
inline std::pair<split, split> load_data(const std::filesystem::path& directory = {}) {
  const std::filesystem::path dir = data_directory(directory);
  std::vector<std::filesystem::path> paths;
  std::vector<std::string> missing;
  for (const char* name : detail::file_names) {
    const std::filesystem::path gz = dir / (std::string(name) + ".gz");
    const std::filesystem::path plain = dir / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(gz, ec)) {
      paths.push_back(gz);
    } else if (std::filesystem::is_regular_file(plain, ec)) {
      paths.push_back(plain);
    } else {
      missing.push_back("'" + gz.string() + "'");
    }
  }
  if (!missing.empty()) {
    std::error_code ec;
    std::string list;
    for (std::size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
    const char* env = std::getenv(directory_variable);
    const std::string source = !directory.empty() ? "the directory passed to load_data"
                               : env != nullptr && *env != '\0'
                                   ? std::string("from $") + directory_variable
                                   : "the default directory";
    throw value_error("Fashion-MNIST file" + std::string(missing.size() > 1 ? "s " : " ") + list +
                      (missing.size() > 1 ? " were" : " was") + " not found (looked in '" +
                      dir.string() + "', " + source +
                      (std::filesystem::is_directory(dir, ec) ? "" : ", which does not exist") +
                      "). " + detail::install_hint() + ".");
  }
  return {detail::load_split(paths[0], paths[1]), detail::load_split(paths[2], paths[3])};
}

}  // namespace tessel::datasets::fashion_mnist
