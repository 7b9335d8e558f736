// summary: the table model.summary() prints, in Keras 3's format (rich's box characters, column
// widths for line_length 88, parameter counts with thousands separators, sizes in B/KB/MB), with
// one more column: the layout of each of the layer's variables on the device mesh.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace tessel {

struct summary_row {
  std::string layer;         // "dense (Dense)"
  std::string output_shape;  // "(None, 256)"
  std::size_t params = 0;
  std::vector<std::string> layouts;  // "kernel (None, None)", one per variable
};

namespace detail {
// "200,960"
inline std::string with_commas(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}
// keras.src.utils.summary_utils.readable_memory_size
inline std::string readable_memory_size(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  for (const char* u : units) {
    if (bytes / 1024 < 1) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.2f %s", bytes, u);
      return buf;
    }
    bytes /= 1024;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f PB", bytes);
  return buf;
}
// Display width in terminal cells: count code points (all our characters are one cell wide).
inline std::size_t cells(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
inline std::string repeat(const std::string& s, std::size_t n) {
  std::string r;
  for (std::size_t i = 0; i < n; ++i) r += s;
  return r;
}
inline std::string cell(const std::string& text, std::size_t width, bool right) {
  const std::size_t w = cells(text);
  const std::string fill(width > w + 2 ? width - w - 2 : 0, ' ');
  return " " + (right ? fill + text : text + fill) + " ";
}
}  // namespace detail

inline std::string format_summary(const std::string& model_name,
                                  const std::vector<summary_row>& rows, std::size_t trainable,
                                  std::size_t non_trainable) {
  using detail::repeat;
  // Keras's widths for three columns at line_length 88, then the layout column.
  std::size_t layout_width = 24;
  for (const auto& r : rows)
    for (const auto& l : r.layouts) layout_width = std::max(layout_width, detail::cells(l) + 2);
  const std::size_t w[4] = {38, 29, 17, layout_width};
  auto rule = [&](const char* left, const char* mid, const char* right, const char* h) {
    std::string s = left;
    for (int i = 0; i < 4; ++i) s += repeat(h, w[i]) + (i < 3 ? mid : right);
    return s + "\n";
  };
  auto line = [&](const char* bar, const std::string& a, const std::string& b, const std::string& c,
                  const std::string& d) {
    return std::string(bar) + detail::cell(a, w[0], false) + bar + detail::cell(b, w[1], false) +
           bar + detail::cell(c, w[2], true) + bar + detail::cell(d, w[3], false) + bar + "\n";
  };
  std::string out = "Model: \"" + model_name + "\"\n";
  out += rule("┏", "┳", "┓", "━");
  out += line("┃", "Layer (type)", "Output Shape", "Param #", "Layout");
  out += rule("┡", "╇", "┩", "━");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    out += line("│", r.layer, r.output_shape, detail::with_commas(r.params),
                r.layouts.empty() ? "" : r.layouts[0]);
    for (std::size_t k = 1; k < r.layouts.size(); ++k) out += line("│", "", "", "", r.layouts[k]);
    if (i + 1 < rows.size()) out += rule("├", "┼", "┤", "─");
  }
  out += rule("└", "┴", "┘", "─");
  const std::size_t total = trainable + non_trainable;
  auto totals = [](const char* label, std::size_t n) {
    return std::string(" ") + label + detail::with_commas(n) + " (" +
           detail::readable_memory_size(static_cast<double>(n) * 4.0) + ")\n";
  };
  out += totals("Total params: ", total);
  out += totals("Trainable params: ", trainable);
  out += totals("Non-trainable params: ", non_trainable);
  return out;
}

}  // namespace tessel
