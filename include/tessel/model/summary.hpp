// summary: the table model.summary() prints, in Keras 3's format (rich's box characters, column
// widths for line_length 88, parameter counts with thousands separators, sizes in B/KB/MB), with
// one more column: the layout of each of the layer's variables on the device mesh.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../core/compilation.hpp"

namespace tessel {

struct summary_row {
  std::string layer;         // "dense (Dense)"
  std::string output_shape;  // "(None, 256)"
  std::size_t params = 0;
  std::vector<std::string> layouts;  // "kernel (None, None)", one per variable
  std::string connected_to;          // "input_layer[0][0], d2[0][0]" (a functional graph)
};

namespace detail {
// "200,960"
TESSEL_INLINE std::string with_commas(std::size_t n);
// keras.src.utils.summary_utils.readable_memory_size
TESSEL_INLINE std::string readable_memory_size(double bytes);
// Display width in terminal cells: count code points (all our characters are one cell wide).
TESSEL_INLINE std::size_t cells(const std::string& s);
TESSEL_INLINE std::string repeat(const std::string& s, std::size_t n);
// Text in lines of at most `width` cells, broken at spaces as rich wraps a table cell.
TESSEL_INLINE std::vector<std::string> wrap(const std::string& text, std::size_t width);
TESSEL_INLINE std::string cell(const std::string& text, std::size_t width, bool right);
}  // namespace detail

// `connections`: the "Connected to" column of a functional model that is not a chain (Keras's
// line_length 108), before the layout column.
TESSEL_INLINE std::string format_summary(const std::string& model_name,
                                         const std::vector<summary_row>& rows,
                                         std::size_t trainable, std::size_t non_trainable,
                                         bool connections = false);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace detail {
TESSEL_INLINE std::string with_commas(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}
TESSEL_INLINE std::string readable_memory_size(double bytes) {
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
TESSEL_INLINE std::size_t cells(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
TESSEL_INLINE std::string repeat(const std::string& s, std::size_t n) {
  std::string r;
  for (std::size_t i = 0; i < n; ++i) r += s;
  return r;
}
TESSEL_INLINE std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && cells(line) + 1 + cells(word) > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  lines.push_back(line);
  return lines;
}
TESSEL_INLINE std::string cell(const std::string& text, std::size_t width, bool right) {
  const std::size_t w = cells(text);
  const std::string fill(width > w + 2 ? width - w - 2 : 0, ' ');
  return " " + (right ? fill + text : text + fill) + " ";
}
}  // namespace detail

TESSEL_INLINE std::string format_summary(const std::string& model_name,
                                         const std::vector<summary_row>& rows,
                                         std::size_t trainable, std::size_t non_trainable,
                                         bool connections) {
  using detail::repeat;
  // Keras's widths for three columns at line_length 88 (four at 108), then the layout column.
  std::size_t layout_width = 24;
  for (const auto& r : rows)
    for (const auto& l : r.layouts) layout_width = std::max(layout_width, detail::cells(l) + 2);
  std::vector<std::size_t> w{38, 29, 17};
  if (connections) w = {31, 27, 17, 28};
  w.push_back(layout_width);
  const std::size_t n = w.size();
  auto rule = [&](const char* left, const char* mid, const char* right, const char* h) {
    std::string s = left;
    for (std::size_t i = 0; i < n; ++i) s += repeat(h, w[i]) + (i + 1 < n ? mid : right);
    return s + "\n";
  };
  auto line = [&](const char* bar, const std::vector<std::string>& texts) {
    std::string s = bar;
    for (std::size_t i = 0; i < n; ++i) s += detail::cell(texts[i], w[i], i == 2) + bar;
    return s + "\n";
  };
  auto columns = [&](std::string a, std::string b, std::string c, std::string conn,
                     std::string layout) {
    std::vector<std::string> t{std::move(a), std::move(b), std::move(c)};
    if (connections) t.push_back(std::move(conn));
    t.push_back(std::move(layout));
    return t;
  };
  std::string out = "Model: \"" + model_name + "\"\n";
  out += rule("┏", "┳", "┓", "━");
  out += line("┃", columns("Layer (type)", "Output Shape", "Param #", "Connected to", "Layout"));
  out += rule("┡", "╇", "┩", "━");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::vector<std::string> conn =
        connections ? detail::wrap(r.connected_to, w[3] - 2) : std::vector<std::string>{""};
    const std::size_t lines = std::max<std::size_t>({1, conn.size(), r.layouts.size()});
    for (std::size_t k = 0; k < lines; ++k)
      out +=
          line("│", columns(k ? "" : r.layer, k ? "" : r.output_shape,
                            k ? "" : detail::with_commas(r.params), k < conn.size() ? conn[k] : "",
                            k < r.layouts.size() ? r.layouts[k] : ""));
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
#endif

}  // namespace tessel
