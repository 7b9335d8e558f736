// The definitions of saving/h5.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include h5.hpp.
namespace tessel::saving::h5 {

TESSEL_INLINE void silence_errors() {
  static const bool done = [] {
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

TESSEL_INLINE std::string error_stack() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto& s = *static_cast<std::string*>(data);
        if (e->desc == nullptr || *e->desc == '\0') return 0;
        if (s.find(e->desc) != std::string::npos) return 0;
        if (!s.empty()) s += "; ";
        s += e->desc;
        return 0;
      },
      &out);
  H5Eclear2(H5E_DEFAULT);
  return out;
}

TESSEL_INLINE handle file_access_list(const std::string& file) {
  handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl || H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
      H5Pset_fclose_degree(fapl.id(), H5F_CLOSE_STRONG) < 0)
    fail(file, "cannot set up its file access properties");
  return fapl;
}

TESSEL_INLINE object create_file(const std::string& file) {
  silence_errors();
  const handle fapl = file_access_list(file);
  handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose);
  if (!f) fail(file, "libhdf5 cannot create the file");
  return {std::move(f), file, "/"};
}

namespace detail {
// The core driver's buffer through malloc/realloc/free, kept (not freed) when the file closes.
inline void* image_malloc(std::size_t size, H5FD_file_image_op_t, void* udata) {
  void* p = std::malloc(size);
  if (p != nullptr) static_cast<memory_file::captured*>(udata)->allocated = size;
  return p;
}
inline void* image_memcpy(void* dst, const void* src, std::size_t size, H5FD_file_image_op_t,
                          void*) {
  return std::memcpy(dst, src, size);
}
inline void* image_realloc(void* p, std::size_t size, H5FD_file_image_op_t, void* udata) {
  void* q = std::realloc(p, size);
  if (q != nullptr) static_cast<memory_file::captured*>(udata)->allocated = size;
  return q;
}
inline herr_t image_free(void* p, H5FD_file_image_op_t op, void* udata) {
  auto* c = static_cast<memory_file::captured*>(udata);
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && c->buffer == nullptr) {
    c->buffer = p;
    return 0;
  }
  std::free(p);
  return 0;
}
// The property lists libhdf5 copies share the one record (memory_file owns it).
inline void* image_udata_copy(void* udata) { return udata; }
inline herr_t image_udata_free(void*) { return 0; }
// The end of an HDF5 file of superblock version 2 or 3 (HDF5 1.8's format, which tessel
// writes): its base address plus the end-of-file address, or 0 if the bytes do not say.
inline std::uint64_t superblock_end(const unsigned char* b, std::size_t n) {
  static constexpr unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (n < 12 || std::memcmp(b, signature, 8) != 0 || b[8] < 2 || b[8] > 3) return 0;
  const std::size_t offsets = b[9];
  if (offsets != 8 || n < 12 + 3 * offsets) return 0;
  std::uint64_t base = 0, eof = 0;
  for (std::size_t i = 8; i-- > 0;) {
    base = (base << 8) | b[12 + i];
    eof = (eof << 8) | b[12 + 2 * offsets + i];
  }
  return base + eof;
}
}  // namespace detail

TESSEL_INLINE memory_file::memory_file(const std::string& name)
    : image_(std::make_unique<captured>()) {
  silence_errors();
  const handle fapl = file_access_list(name);
  // The buffer grows by 1 MiB at a time; nothing is written to a file on disk.
  H5FD_file_image_callbacks_t callbacks{&detail::image_malloc, &detail::image_memcpy,
                                        &detail::image_realloc, &detail::image_free,
                                        &detail::image_udata_copy, &detail::image_udata_free,
                                        image_.get()};
  if (H5Pset_fapl_core(fapl.id(), std::size_t{1} << 20, 0) < 0 ||
      H5Pset_file_image_callbacks(fapl.id(), &callbacks) < 0)
    fail(name, "cannot set up a file in memory");
  handle f(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose);
  if (!f) fail(name, "libhdf5 cannot create the file in memory");
  file_ = {std::move(f), name, "/"};
}

TESSEL_INLINE memory_file::~memory_file() {
  file_.h = handle();  // closes the file if close() did not
  std::free(image_->buffer);
}

TESSEL_INLINE std::span<const unsigned char> memory_file::close() {
  if (!file_.h.close()) fail(file_.file, "libhdf5 cannot close the file in memory");
  const auto* b = static_cast<const unsigned char*>(image_->buffer);
  const std::uint64_t end = b != nullptr ? detail::superblock_end(b, image_->allocated) : 0;
  if (end == 0 || end > image_->allocated)
    fail(file_.file, "libhdf5 left no complete file in memory");
  return {b, static_cast<std::size_t>(end)};
}

TESSEL_INLINE object open_file(const std::string& file) {
  silence_errors();
  handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f) fail(file, "libhdf5 cannot open it as an HDF5 file");
  return {std::move(f), file, "/"};
}

TESSEL_INLINE bool has(const object& parent, std::string_view name) {
  const std::string n(name);
  const htri_t e = H5Lexists(parent.id(), n.c_str(), H5P_DEFAULT);
  if (e < 0) fail(parent.file, "cannot look up '" + parent.child_path(name) + "'");
  if (e == 0) return false;
  H5L_info_t info{};
  if (H5Lget_info(parent.id(), n.c_str(), &info, H5P_DEFAULT) < 0)
    fail(parent.file, "cannot read the link '" + parent.child_path(name) + "'");
  if (info.type != H5L_TYPE_HARD)
    fail(parent.file, "'" + parent.child_path(name) + "' is a " +
                          (info.type == H5L_TYPE_SOFT ? "soft" : "external") +
                          " link; a weights file holds its groups and datasets itself");
  return true;
}

TESSEL_INLINE object create_group(const object& parent, std::string_view name) {
  const std::string n(name);
  handle g(H5Gcreate2(parent.id(), n.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g) fail(parent.file, "cannot create the group '" + parent.child_path(name) + "'");
  return {std::move(g), parent.file, parent.child_path(name)};
}

TESSEL_INLINE object open_group(const object& parent, std::string_view name) {
  const std::string n(name), path = parent.child_path(name);
  H5O_info_t info{};
  if (H5Oget_info_by_name(parent.id(), n.c_str(), &info, H5P_DEFAULT) < 0)
    fail(parent.file, "cannot read the object '" + path + "'");
  if (info.type != H5O_TYPE_GROUP) fail(parent.file, "'" + path + "' is not a group");
  handle g(H5Gopen2(parent.id(), n.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g) fail(parent.file, "cannot open the group '" + path + "'");
  return {std::move(g), parent.file, path};
}

TESSEL_INLINE std::vector<std::string> members(const object& group) {
  H5G_info_t info{};
  if (H5Gget_info(group.id(), &info) < 0)
    fail(group.file, "cannot list the group '" + group.path + "'");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n =
        H5Lget_name_by_idx(group.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(group.file, "cannot read a member's name in '" + group.path + "'");
    std::string name(static_cast<std::size_t>(n), '\0');
    if (H5Lget_name_by_idx(group.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(),
                           name.size() + 1, H5P_DEFAULT) < 0)
      fail(group.file, "cannot read a member's name in '" + group.path + "'");
    out.push_back(std::move(name));
  }
  return out;
}

TESSEL_INLINE void write_attribute(const object& o, std::string_view name, std::string_view value) {
  const std::string n(name), v(value);
  handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (!type || !space || H5Tset_size(type.id(), H5T_VARIABLE) < 0 ||
      H5Tset_cset(type.id(), H5T_CSET_UTF8) < 0)
    fail(o.file, "cannot make a string type");
  handle a(H5Acreate2(o.id(), n.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  const char* p = v.c_str();
  if (!a || H5Awrite(a.id(), type.id(), &p) < 0)
    fail(o.file, "cannot write the attribute '" + n + "' of '" + o.path + "'");
}

TESSEL_INLINE std::optional<std::string> read_string_attribute(const object& o,
                                                               std::string_view name) {
  const std::string n(name);
  const htri_t e = H5Aexists(o.id(), n.c_str());
  if (e < 0) fail(o.file, "cannot look up the attribute '" + n + "' of '" + o.path + "'");
  if (e == 0) return std::nullopt;
  handle a(H5Aopen(o.id(), n.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a) fail(o.file, "cannot open the attribute '" + n + "' of '" + o.path + "'");
  handle space(H5Aget_space(a.id()), H5Sclose);
  handle type(H5Aget_type(a.id()), H5Tclose);
  if (!space || !type || H5Sget_simple_extent_type(space.id()) != H5S_SCALAR ||
      H5Tget_class(type.id()) != H5T_STRING)
    fail(o.file, "the attribute '" + n + "' of '" + o.path + "' is not a string");
  const htri_t variable = H5Tis_variable_str(type.id());
  handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  // libhdf5 converts no string between character sets: read it in the attribute's own.
  if (variable < 0 || !mem || H5Tset_cset(mem.id(), H5Tget_cset(type.id())) < 0)
    fail(o.file, "cannot read the type of the attribute '" + n + "'");
  if (variable > 0) {
    char* p = nullptr;
    if (H5Tset_size(mem.id(), H5T_VARIABLE) < 0 || H5Aread(a.id(), mem.id(), &p) < 0)
      fail(o.file, "cannot read the attribute '" + n + "' of '" + o.path + "'");
    std::string out = p ? p : "";
    H5free_memory(p);
    return out;
  }
  const std::size_t size = H5Tget_size(type.id());
  if (size == 0 || size > (1u << 16))
    fail(o.file, "the attribute '" + n + "' of '" + o.path + "' has an unusable size");
  std::string out(size, '\0');
  if (H5Tset_size(mem.id(), size) < 0 || H5Aread(a.id(), mem.id(), out.data()) < 0)
    fail(o.file, "cannot read the attribute '" + n + "' of '" + o.path + "'");
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

TESSEL_INLINE object write_dataset(const object& group, std::string_view name,
                                   const std::vector<std::size_t>& shape,
                                   std::span<const float> values) {
  const std::string n(name);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  handle d(H5Dcreate2(group.id(), n.c_str(), H5T_IEEE_F32LE, space.id(), H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT),
           H5Dclose);
  if (!d || H5Dwrite(d.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    fail(group.file, "cannot write the dataset '" + group.child_path(name) + "'");
  return {std::move(d), group.file, group.child_path(name)};
}

TESSEL_INLINE std::optional<std::uint64_t> raw_data_offset(const object& dataset) {
  const haddr_t at = H5Dget_offset(dataset.id());
  if (at == HADDR_UNDEF) return std::nullopt;
  return static_cast<std::uint64_t>(at);
}

TESSEL_INLINE object write_scalar(const object& group, std::string_view name, std::int32_t value) {
  const std::string n(name);
  handle space(H5Screate(H5S_SCALAR), H5Sclose);
  handle d(H5Dcreate2(group.id(), n.c_str(), H5T_STD_I32LE, space.id(), H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT),
           H5Dclose);
  if (!d || H5Dwrite(d.id(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0)
    fail(group.file, "cannot write the dataset '" + group.child_path(name) + "'");
  return {std::move(d), group.file, group.child_path(name)};
}

TESSEL_INLINE std::pair<object, dataset_info> open_dataset(const object& group,
                                                           std::string_view name) {
  const std::string n(name), path = group.child_path(name);
  H5O_info_t oi{};
  if (H5Oget_info_by_name(group.id(), n.c_str(), &oi, H5P_DEFAULT) < 0)
    fail(group.file, "cannot read the object '" + path + "'");
  if (oi.type != H5O_TYPE_DATASET) fail(group.file, "'" + path + "' is not a dataset");
  handle d(H5Dopen2(group.id(), n.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d) fail(group.file, "cannot open the dataset '" + path + "'");
  handle plist(H5Dget_create_plist(d.id()), H5Pclose);
  if (!plist) fail(group.file, "cannot read how '" + path + "' is stored");
  const int external = H5Pget_external_count(plist.id());
  const H5D_layout_t layout = H5Pget_layout(plist.id());
  if (external != 0 || layout == H5D_VIRTUAL || layout == H5D_LAYOUT_ERROR)
    fail(group.file, "'" + path +
                         "' keeps its values outside the file (external or virtual "
                         "storage), which a weights file does not");
  handle space(H5Dget_space(d.id()), H5Sclose);
  handle type(H5Dget_type(d.id()), H5Tclose);
  if (!space || !type) fail(group.file, "cannot read the shape and type of '" + path + "'");
  dataset_info info;
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0 || rank > 32) fail(group.file, "cannot read the shape of '" + path + "'");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr) < 0)
    fail(group.file, "cannot read the shape of '" + path + "'");
  info.shape.assign(dims.begin(), dims.end());
  info.type_class = H5Tget_class(type.id());
  info.type_size = H5Tget_size(type.id());
  return {object{std::move(d), group.file, path}, std::move(info)};
}

}  // namespace tessel::saving::h5
