#pragma once
// keras.datasets.fashion_mnist.load_data(), from the IDX files of Debian's dataset-fashion-mnist
// package (no download: the files are read where they are installed). Link with -lz.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "array.hpp"
#include "file_access.hpp"
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

// "train-images-idx3-ubyte.gz, ... and t10k-labels-idx1-ubyte.gz".
TESSEL_INLINE std::string file_list();

TESSEL_INLINE std::string install_hint();

// Shape and label range, checked so that a wrong file (MNIST digits' labels are fine, a random
// IDX file is not) fails here and not as a confusing error inside fit.
TESSEL_INLINE split load_split(const std::filesystem::path& images_path,
                               const std::filesystem::path& labels_path);

}  // namespace detail

// ((x_train, y_train), (x_test, y_test)) as keras.datasets.fashion_mnist.load_data() returns them:
// x_train (60000, 28, 28), y_train (60000,), x_test (10000, 28, 28), y_test (10000,), all uint8.
// Reads NAME.gz, or NAME uncompressed, from data_directory(directory). Throws value_error naming
// the path and what is wrong with it: files or a directory that are missing (with the package to
// install and the environment variable), a directory that is not one, or a path the system
// refuses (permission denied, with its text).
TESSEL_INLINE std::pair<split, split> load_data(const std::filesystem::path& directory = {});

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS

namespace detail {

TESSEL_INLINE std::string file_list() {
  std::string files;
  for (std::size_t i = 0; i < 4; ++i)
    files += std::string(i ? (i == 3 ? " and " : ", ") : "") + file_names[i] + ".gz";
  return files;
}

TESSEL_INLINE std::string install_hint() {
  return std::string(
             "Install Debian's package with `apt-get install dataset-fashion-mnist`, or set ") +
         directory_variable + " to a directory that holds " + file_list();
}

TESSEL_INLINE split load_split(const std::filesystem::path& images_path,
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

TESSEL_INLINE std::pair<split, split> load_data(const std::filesystem::path& directory) {
  const std::filesystem::path dir = data_directory(directory);
  const char* env = std::getenv(directory_variable);
  const bool from_env = directory.empty() && env != nullptr && *env != '\0';
  // Where the directory came from, and what to change when it or a file in it cannot be used.
  const std::string source = !directory.empty() ? "the directory passed to load_data"
                             : from_env         ? std::string("from $") + directory_variable
                                                : "the default directory";
  const std::string source_directory =
      from_env ? std::string("the directory from $") + directory_variable : source;
  const std::string elsewhere =
      (!directory.empty() ? std::string("pass the directory")
                          : std::string("set ") + directory_variable + " to the directory") +
      " that holds " + detail::file_list();
  using status = data::path_access::status;

  const data::path_access d = data::check_path(dir, data::path_kind::directory);
  if (!d.ok() && !d.missing()) {
    throw value_error(
        "Fashion-MNIST directory '" + dir.string() + "' (" + source + ") " + d.reason + "; " +
        (d.state == status::refused ? "change its permissions, or " : "") + elsewhere + ".");
  }
  std::vector<std::filesystem::path> paths;
  std::vector<std::string> missing;
  for (const char* name : detail::file_names) {
    const std::filesystem::path gz = dir / (std::string(name) + ".gz");
    const std::filesystem::path plain = dir / name;
    std::filesystem::path found = gz;
    data::path_access f = data::check_path(gz, data::path_kind::file);
    if (f.missing()) {
      found = plain;
      f = data::check_path(plain, data::path_kind::file);
    }
    if (f.ok()) {
      paths.push_back(found);
    } else if (f.missing()) {
      missing.push_back("'" + gz.string() + "'");
    } else {
      throw value_error(
          "Fashion-MNIST file '" + found.string() + "' (in " + source_directory + ") " + f.reason +
          "; " +
          (f.state == status::refused ? "change the permissions" : "replace it with the IDX file") +
          ", or " + elsewhere + ".");
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
    throw value_error("Fashion-MNIST file" + std::string(missing.size() > 1 ? "s " : " ") + list +
                      (missing.size() > 1 ? " were" : " was") + " not found (looked in '" +
                      dir.string() + "', " + source +
                      (d.missing() ? ", which does not exist" : "") + "). " +
                      detail::install_hint() + ".");
  }
  return {detail::load_split(paths[0], paths[1]), detail::load_split(paths[2], paths[3])};
}

#endif

}  // namespace tessel::datasets::fashion_mnist
