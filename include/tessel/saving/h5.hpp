// h5: a small C++ face on libhdf5's C API (Debian's serial libhdf5-dev), as much of it as Keras's
// weights files need: files, groups, float and integer datasets, scalar attributes. Every handle
// closes itself; every failure is a tessel error naming the file and what was being done, with
// libhdf5's own words (its error stack, which it no longer prints itself).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"

namespace tessel::saving::h5 {

// libhdf5 prints its error stack to stderr on every failure unless told not to: tessel reports
// the failure itself, once, as an exception. Called before any other libhdf5 call.
TESSEL_INLINE void silence_errors();

// The descriptions on libhdf5's current error stack, innermost first ("" when it is empty).
TESSEL_INLINE std::string error_stack();

// Thrown for a file libhdf5 cannot read or write: "<file>: <what> (libhdf5: <its words>)".
[[noreturn]] inline void fail(const std::string& file, const std::string& what) {
  const std::string stack = error_stack();
  throw value_error(file + ": " + what + (stack.empty() ? "" : " (libhdf5: " + stack + ")"));
}

// An open libhdf5 object (file, group, dataset, dataspace, datatype, attribute, property list),
// closed by the matching H5?close when it goes.
class handle {
 public:
  using closer = herr_t (*)(hid_t);
  handle() = default;
  handle(hid_t id, closer close) : id_(id), close_(close) {}
  handle(handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  handle& operator=(handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  handle(const handle&) = delete;
  handle& operator=(const handle&) = delete;
  ~handle() { reset(); }
  hid_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ >= 0; }
  // Closes now, reporting a failure (a file's last write happens in H5Fclose).
  bool close() {
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    return id < 0 || close_(id) >= 0;
  }

 private:
  void reset() noexcept {
    if (id_ >= 0) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
  closer close_ = nullptr;
};

// An object, its file's name for messages, and its path in the file.
struct object {
  handle h;
  std::string file;
  std::string path;  // "/", "/layers/dense/vars"
  hid_t id() const noexcept { return h.id(); }
  std::string child_path(std::string_view name) const {
    return (path == "/" ? "/" : path + "/") + std::string(name);
  }
};

// The file format's version bounds: HDF5 1.8's format, whose superblock, object headers and
// B-trees carry checksums, so that libhdf5 finds damaged metadata instead of following it;
// every libhdf5 since 1.8 (h5py's included) reads it. Closing the file closes every object still
// open in it, so that the file is complete when H5Fclose returns (by default libhdf5 would
// finish it only when the last object goes).
TESSEL_INLINE handle file_access_list(const std::string& file);

// Creates (or truncates) a file to write.
TESSEL_INLINE object create_file(const std::string& file);

// A file libhdf5 builds in memory (its core driver, no backing store), `name` naming it in
// messages. tessel writes the files it saves this way and then writes their bytes itself
// (file_writer), so that a full disk or an I/O error is its own error with the system's words,
// and libhdf5 never holds a file it could not finish: when libhdf5 wrote to the disk, a failed
// H5Fclose left the file open inside it, and the process died in libhdf5's exit handler.
// (H5Fget_file_image's copy of a file of HDF5 1.8's format has a superblock whose checksum
// libhdf5 1.10 then refuses: the bytes are taken from the driver's buffer once the file is
// closed, through file image callbacks.)
class memory_file {
 public:
  explicit memory_file(const std::string& name);
  memory_file(const memory_file&) = delete;
  memory_file& operator=(const memory_file&) = delete;
  ~memory_file();
  // The file's root group, to write into.
  [[nodiscard]] const object& root() const noexcept { return file_; }
  // Closes the file (in memory: nothing can fail for want of disk) and returns its bytes, up to
  // the end its superblock records: the driver's own buffer, valid while this object lives.
  std::span<const unsigned char> close();

  struct captured {  // the driver's buffer, kept when the file closes
    void* buffer = nullptr;
    std::size_t allocated = 0;
  };

 private:
  std::unique_ptr<captured> image_;
  object file_;
};

// Opens a file to read.
TESSEL_INLINE object open_file(const std::string& file);

// Whether `parent` has a link `name` that resolves to an object. Soft and external links are
// refused, as Keras refuses them (they could point outside the file).
TESSEL_INLINE bool has(const object& parent, std::string_view name);

TESSEL_INLINE object create_group(const object& parent, std::string_view name);

// The group `name` of `parent`, which must exist (check with has()) and be a group.
TESSEL_INLINE object open_group(const object& parent, std::string_view name);

// The names of a group's members, in libhdf5's name order.
TESSEL_INLINE std::vector<std::string> members(const object& group);

// ---- attributes ----------------------------------------------------------------------------
// A scalar string attribute, variable-length UTF-8 (as h5py writes a Python str).
TESSEL_INLINE void write_attribute(const object& o, std::string_view name, std::string_view value);

// A scalar string attribute (variable-length or fixed-length), if `o` has one of that name.
TESSEL_INLINE std::optional<std::string> read_string_attribute(const object& o,
                                                               std::string_view name);

namespace detail {
template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, std::uint32_t>)
    return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return H5T_NATIVE_INT64;
  else
    return H5T_NATIVE_DOUBLE;
}
template <class T>
hid_t file_type() {
  if constexpr (std::is_same_v<T, std::uint32_t>)
    return H5T_STD_U32LE;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return H5T_STD_I64LE;
  else
    return H5T_IEEE_F64LE;
}
}  // namespace detail

// A scalar number attribute (uint32, int64 or float64).
template <class T>
requires std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, double>
void write_attribute(const object& o, std::string_view name, T value) {
  const std::string n(name);
  handle space(H5Screate(H5S_SCALAR), H5Sclose);
  handle a(
      H5Acreate2(o.id(), n.c_str(), detail::file_type<T>(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
      H5Aclose);
  if (!a || H5Awrite(a.id(), detail::native_type<T>(), &value) < 0)
    fail(o.file, "cannot write the attribute '" + n + "' of '" + o.path + "'");
}

// A scalar number attribute, if `o` has one of that name; a non-scalar or non-numeric one is an
// error.
template <class T>
std::optional<T> read_attribute(const object& o, std::string_view name) {
  const std::string n(name);
  const htri_t e = H5Aexists(o.id(), n.c_str());
  if (e < 0) fail(o.file, "cannot look up the attribute '" + n + "' of '" + o.path + "'");
  if (e == 0) return std::nullopt;
  handle a(H5Aopen(o.id(), n.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a) fail(o.file, "cannot open the attribute '" + n + "' of '" + o.path + "'");
  handle space(H5Aget_space(a.id()), H5Sclose);
  handle type(H5Aget_type(a.id()), H5Tclose);
  const H5T_class_t c = type ? H5Tget_class(type.id()) : H5T_NO_CLASS;
  if (!space || H5Sget_simple_extent_type(space.id()) != H5S_SCALAR ||
      (c != H5T_INTEGER && c != H5T_FLOAT))
    fail(o.file, "the attribute '" + n + "' of '" + o.path + "' is not a scalar number");
  T value{};
  if (H5Aread(a.id(), detail::native_type<T>(), &value) < 0)
    fail(o.file, "cannot read the attribute '" + n + "' of '" + o.path + "'");
  return value;
}

// ---- datasets ------------------------------------------------------------------------------
// Writes a float32 dataset (little-endian, contiguous, as h5py writes a NumPy array) of `shape`
// ({} for a scalar); returns it, for attributes.
TESSEL_INLINE object write_dataset(const object& group, std::string_view name,
                                   const std::vector<std::size_t>& shape,
                                   std::span<const float> values);
// Where a contiguous dataset's values start in its file (its bytes as written, little-endian
// floats, one after another), or nothing when libhdf5 keeps them elsewhere (a compact dataset's
// values sit in its header).
TESSEL_INLINE std::optional<std::uint64_t> raw_data_offset(const object& dataset);
// A scalar int32 dataset (Keras's optimizer iteration count).
TESSEL_INLINE object write_scalar(const object& group, std::string_view name, std::int32_t value);

// What a dataset holds, read before its values: its shape ({} for a scalar) and its element
// type's class.
struct dataset_info {
  std::vector<std::size_t> shape;
  H5T_class_t type_class = H5T_NO_CLASS;
  std::size_t type_size = 0;
  std::size_t elements() const {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    return n;
  }
};

// The dataset `name` of `group` (which must exist), and what it holds. Datasets whose values
// live outside the file (external storage, virtual datasets) are refused, as Keras refuses them.
TESSEL_INLINE std::pair<object, dataset_info> open_dataset(const object& group,
                                                           std::string_view name);

// Reads a dataset's values, converted to T (float, double or int64) by libhdf5; `out` has one
// element per value (the caller checked the shape first).
template <class T>
void read_values(const object& dataset, std::span<T> out) {
  hid_t mem = H5T_NATIVE_FLOAT;
  if constexpr (std::is_same_v<T, double>)
    mem = H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    mem = H5T_NATIVE_INT64;
  if (H5Dread(dataset.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    fail(dataset.file, "cannot read the values of '" + dataset.path + "'");
}

}  // namespace tessel::saving::h5

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/h5.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
