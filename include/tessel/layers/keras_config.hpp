// keras_config: a layer's Keras config (what `layer.get_config()` returns, as a .keras archive's
// config.json holds it), written by the layer itself through its trait
// `static void keras_config(keras_config&)`: the fields after Keras's common ones (name,
// trainable, dtype), in Keras's order. A tiny JSON writer with no dependency, so that each layer
// describes itself in its own header; saving/model_config.hpp puts the layers together.
#pragma once

#include <array>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>

#include "../core/compilation.hpp"

namespace tessel::layers {

class keras_config {
 public:
  // Whether Keras records the layer's build_config (its input shape): layers that Keras builds
  // when they are first called do; those built when made (the activations, Dropout, the
  // pooling layers) do not.
  bool build_config = true;

  void field(std::string_view key, std::string_view v) { raw(key, quote(v)); }
  void field(std::string_view key, const char* v) { field(key, std::string_view(v)); }
  void field(std::string_view key, bool v) { raw(key, v ? "true" : "false"); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) void field(std::string_view key, I v) {
    raw(key, std::to_string(v));
  }
  void field(std::string_view key, double v) { raw(key, number(v)); }
  void field(std::string_view key, std::array<std::size_t, 2> v) {
    // Appended (not `"[" + std::string&&`: GCC 12 reports a false -Warray-bounds on that at -O3,
    // its bug 105329).
    std::string text = "[";
    text.append(std::to_string(v[0])).append(", ").append(std::to_string(v[1])).append("]");
    raw(key, text);
  }
  void null(std::string_view key) { raw(key, "null"); }
  // An initializer by its Keras name ("glorot_uniform"), serialized as Keras serializes one.
  void initializer(std::string_view key, std::string_view name);
  // A value already in JSON.
  void raw(std::string_view key, std::string_view json);
  // The fields written, comma separated (no braces).
  const std::string& text() const noexcept { return text_; }

  // A string as JSON ("\"relu\"").
  static std::string quote(std::string_view s);
  // A double as Python's json writes a float: the shortest text that reads back the same, with
  // ".0" on a whole number (0.0, 2.0) and Python's exponent form (1e-07).
  static std::string number(double v);

 private:
  std::string text_;
};

// Whether a layer type describes itself for a .keras archive.
template <class L>
concept has_keras_config = requires(keras_config& c) {
  L::keras_config(c);
};

#if TESSEL_DEFINITIONS
TESSEL_INLINE void keras_config::initializer(std::string_view key, std::string_view name) {
  std::string cls, config = "{}";
  if (name == "glorot_uniform" || name == "glorot_normal" || name == "he_uniform" ||
      name == "he_normal" || name == "lecun_uniform" || name == "lecun_normal")
    config = R"({"seed": null})";
  if (name == "glorot_uniform" || name == "glorot_normal")
    config = R"({"seed": null, "input_axes": null, "output_axes": null})";
  bool up = true;
  for (char c : name) {
    if (c == '_') {
      up = true;
      continue;
    }
    cls += up && c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
    up = false;
  }
  raw(key, R"({"module": "keras.initializers", "class_name": )" + quote(cls) + R"(, "config": )" +
               config + R"(, "registered_name": null})");
}
TESSEL_INLINE std::string keras_config::quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
      continue;
    }
    out += c;
  }
  return out + "\"";
}
TESSEL_INLINE std::string keras_config::number(double v) {
  std::array<char, 32> b{};
  const auto r = std::to_chars(b.data(), b.data() + b.size(), v);
  std::string s(b.data(), r.ptr);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  const std::size_t e = s.find('e');
  if (e != std::string::npos && e + 2 < s.size() + 1) {
    // to_chars writes 1e-07 as Python does; make sure of two exponent digits.
    std::size_t d = e + 1;
    if (s[d] == '-' || s[d] == '+') ++d;
    if (s.size() - d == 1) s.insert(d, "0");
  }
  return s;
}
TESSEL_INLINE void keras_config::raw(std::string_view key, std::string_view json) {
  if (!text_.empty()) text_ += ", ";
  text_ += quote(key);
  text_ += ": ";
  text_ += json;
}
#endif

}  // namespace tessel::layers
