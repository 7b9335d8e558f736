#pragma once
// keras.utils.Progbar (Keras 3.15.1, keras/src/utils/progbar.py), ported so that the bytes written
// are the ones Keras writes: same ANSI styling, same "━" bar, same redraw characters, same number
// formatting (Python's %-formatting and f-strings, reproduced with printf where they agree and by
// hand where they do not), same throttling and step-time estimate.
//
// Time and output are injected so that tests can drive them: `clock` returns seconds (Keras reads
// time.time() once in the constructor and once per update, and so does this class), `out` is the
// sink Keras's print_msg writes to (sys.stdout), flushed after every message as print_msg does.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"
#include "tessel/trainer/logs.hpp"

namespace tessel {

namespace progbar_detail {

// Python's float `%` (floatobject.c float_rem): the result takes the divisor's sign.
TESSEL_INLINE double py_mod(double x, double y);

// Python's float `//` (floatobject.c _float_div_mod), which is not always floor(x / y).
TESSEL_INLINE double py_floordiv(double x, double y);

// Python's "%d" % some_float: int() of it, which truncates toward zero. Keras never gets a
// non-finite ETA from a monotonic clock (Python would raise there); print 0 rather than invoke
// undefined behaviour.
inline long long py_int(double x) {
  if (!std::isfinite(x)) return 0;
  constexpr double limit = 9.2e18;
  return static_cast<long long>(std::clamp(x, -limit, limit));
}

// Every format used here has a bounded output: integers, and doubles with at most 4 decimals
// (DBL_MAX with "%.4f" is 316 characters), so a fixed buffer always holds it.
template <class... Args>
std::string printf_string(const char* format, Args... args) {
  char text[512];
  const int size = std::snprintf(text, sizeof text, format, args...);
  return std::string(text, static_cast<std::size_t>(std::clamp(size, 0, 511)));
}

// Python's "%{width}d" % value: right-aligned in `width` columns, never cut.
TESSEL_INLINE std::string padded(std::size_t value, int width);

// f"{x:.{precision}f}" / f"{x:.{precision}e}". printf rounds the exact binary value half to even,
// as Python's correctly rounded formatting does, and prints at least two exponent digits
// ("1.2346e-04"), as Python does; they differ only on NaN, which Python prints unsigned.
TESSEL_INLINE std::string py_format(double x, int precision, char conversion);

// len() of a Python str: code points, not UTF-8 bytes ("━" is one, of three bytes).
TESSEL_INLINE std::size_t code_points(const std::string& text);

TESSEL_INLINE std::string repeat(std::string_view piece, long long count);

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace progbar_detail

// Keras redraws in place (backspaces, then a carriage return) when
//   sys.stdout.isatty() or "ipykernel" in sys.modules or "posix" in sys.modules
//   or "PYCHARM_HOSTED" in os.environ.
// Python imports its `posix` module on every POSIX system at start-up, so on Linux and macOS the
// answer is always yes, even with stdout redirected to a file (checked with Keras 3.15.1 writing
// to a file: the bytes hold "\b...\r"). Elsewhere only the PyCharm variable is left to look at,
// short of a terminal check this header does without.
inline bool keras_dynamic_display() {
#if defined(__unix__) || defined(__APPLE__)
  return true;
#else
  return std::getenv("PYCHARM_HOSTED") != nullptr;
#endif
}

struct progbar_options {
  // Total number of steps; empty when unknown.
  std::optional<std::size_t> target = std::nullopt;
  int width = 20;
  // 0: silent, 1: a bar redrawn as steps go, 2: one line when finalized.
  int verbose = 1;
  // Minimum seconds between two redraws at verbose 1 (a finalizing update always draws).
  double interval = 0.05;
  // Keras takes one of the two, never both: names shown as given (the rest averaged over the
  // steps), or names averaged (the rest shown as given). With neither, every name is averaged.
  std::optional<std::set<std::string>> stateful_metrics = std::nullopt;
  std::optional<std::set<std::string>> stateless_metrics = std::nullopt;
  std::string unit_name = "step";
  // Where the bar is written; null means std::cout.
  std::ostream* out = nullptr;
  // Seconds on any fixed origin; empty means std::chrono::steady_clock.
  std::function<double()> clock = {};
  // Redraw in place ("\b"s and "\r") or start each redraw on a new line ("\n"); empty means
  // keras_dynamic_display().
  std::optional<bool> dynamic_display = std::nullopt;
};

class progbar {
 public:
  explicit progbar(progbar_options options);

  // Keras's positional signature, Progbar(target, width, verbose, interval, stateful_metrics,
  // unit_name), then the sink, the clock and the redraw mode.
  explicit progbar(std::optional<std::size_t> target, int width = 20, int verbose = 1,
                   double interval = 0.05, std::set<std::string> stateful_metrics = {},
                   std::string unit_name = "step", std::ostream& out = std::cout,
                   std::function<double()> clock = {},
                   std::optional<bool> dynamic_display = std::nullopt)
      : progbar(progbar_options{.target = target,
                                .width = width,
                                .verbose = verbose,
                                .interval = interval,
                                .stateful_metrics = std::move(stateful_metrics),
                                .stateless_metrics = std::nullopt,
                                .unit_name = std::move(unit_name),
                                .out = &out,
                                .clock = std::move(clock),
                                .dynamic_display = dynamic_display}) {}

  // `current` is the index of the step just done (1-based). `values` are (name, value of the
  // last step); averaged names are shown as the mean over steps, weighted by how many steps
  // each update covers. `finalize` defaults to current >= target (never, with no target).
  void update(std::size_t current, const logs& values = {},
              std::optional<bool> finalize = std::nullopt);

  // Advances by `n` steps from the last update.
  void add(std::size_t n, const logs& values = {}) {
    update(static_cast<std::size_t>(seen_so_far_) + n, values);
  }

  const std::optional<std::size_t>& target() const { return target_; }
  // ProgbarLogger learns the step count at the end of a first epoch of unknown length and sets it
  // on the bar before the finalizing update.
  void set_target(std::optional<std::size_t> target) { target_ = target; }
  bool dynamic_display() const { return dynamic_display_; }

 private:
  struct sum_and_count {
    double sum = 0.0;
    long long count = 0;
  };

  // Keras's _estimate_step_duration: the first step (compilation, warm-up) is left out of the
  // per-step time once a later step exists.
  double estimate_step_duration(std::size_t current, double now);

  static std::string format_time(double time_per_unit, const std::string& unit_name);

  double average(const std::string& name) const {
    const sum_and_count& entry = values_.at(name);
    return entry.sum / static_cast<double>(std::max(1LL, entry.count));
  }

  // "%{numdigits}d/%d" % (current, target), numdigits = int(math.log10(target)) + 1.
  std::string step_count(std::size_t current) const;

  void write_bar(std::size_t current, double now, double time_per_unit, bool last);

  // verbose 2: "3/3 - 0s - 4ms/step - loss: 0.1234", once, when finalized.
  void write_line(std::size_t current, double now, double time_per_unit);

  std::optional<std::size_t> target_;
  int width_;
  int verbose_;
  double interval_;
  std::string unit_name_;
  std::ostream* out_;
  std::function<double()> clock_;
  bool dynamic_display_;
  // Names in averaged_names_ are averaged when average_listed_, else all other names are.
  std::set<std::string> averaged_names_;
  bool average_listed_ = false;

  long long seen_so_far_ = 0;
  std::map<std::string, sum_and_count> values_;
  std::vector<std::string> order_;
  double start_ = 0.0;
  // Keras starts this at 0 (the epoch), so the first update always draws when the clock is
  // time.time(); a clock that starts near 0 throttles updates in the first `interval` seconds.
  double last_update_ = 0.0;
  std::optional<double> time_after_first_step_;
  std::size_t prev_total_width_ = 0;
};

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace progbar_detail {
TESSEL_INLINE double py_mod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

TESSEL_INLINE double py_floordiv(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0.0) return std::copysign(0.0, x / y);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

TESSEL_INLINE std::string padded(std::size_t value, int width) {
  std::string text = std::to_string(value);
  if (static_cast<int>(text.size()) < width) {
    text.insert(0, static_cast<std::size_t>(width) - text.size(), ' ');
  }
  return text;
}

TESSEL_INLINE std::string py_format(double x, int precision, char conversion) {
  if (std::isnan(x)) return "nan";
  const char* format = conversion == 'e' ? "%.*e" : "%.*f";
  return printf_string(format, precision, x);
}

TESSEL_INLINE std::size_t code_points(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

TESSEL_INLINE std::string repeat(std::string_view piece, long long count) {
  std::string text;
  for (long long i = 0; i < count; ++i) text += piece;
  return text;
}
}  // namespace progbar_detail

TESSEL_INLINE progbar::progbar(progbar_options options)
    : target_(options.target),
      width_(options.width),
      verbose_(options.verbose),
      interval_(options.interval),
      unit_name_(std::move(options.unit_name)),
      out_(options.out ? options.out : &std::cout),
      clock_(options.clock ? std::move(options.clock)
                           : std::function<double()>(progbar_detail::steady_seconds)),
      dynamic_display_(options.dynamic_display.value_or(keras_dynamic_display())) {
  if (options.stateful_metrics && options.stateless_metrics) {
    throw std::invalid_argument(
        "progbar: give stateful_metrics or stateless_metrics, not both (stateful_metrics "
        "averages all but the names given, stateless_metrics averages only the names given)");
  }
  if (options.stateless_metrics) {
    averaged_names_ = std::move(*options.stateless_metrics);
    average_listed_ = true;
  } else if (options.stateful_metrics) {
    averaged_names_ = std::move(*options.stateful_metrics);
  }
  start_ = clock_();
}

TESSEL_INLINE void progbar::update(std::size_t current, const logs& values,
                                   std::optional<bool> finalize) {
  const bool last = finalize.value_or(target_.has_value() && current >= *target_);
  const auto signed_current = static_cast<long long>(current);

  for (const auto& [name, value] : values) {
    auto found = values_.find(name);
    if (found == values_.end()) {
      order_.push_back(name);
      found = values_.emplace(name, sum_and_count{}).first;
    }
    const bool listed = averaged_names_.count(name) != 0;
    if (listed == average_listed_ && !last) {
      // Steps covered by this update, at least one: with an unknown target the last batch
      // and the finalizing update carry the same `current`.
      const long long base = std::max(signed_current - seen_so_far_, 1LL);
      const bool first = found->second.count == 0;
      if (first) {
        found->second = {value * static_cast<double>(base), base};
      } else {
        found->second.sum += value * static_cast<double>(base);
        found->second.count += base;
      }
    } else {
      // Shown as given: the finalizing update of an averaged name too, since by then the
      // caller passes the epoch's own result.
      found->second = {value, 1};
    }
  }
  seen_so_far_ = signed_current;

  const double now = clock_();
  const double time_per_unit = estimate_step_duration(current, now);

  if (verbose_ == 1) {
    if (now - last_update_ < interval_ && !last) return;
    write_bar(current, now, time_per_unit, last);
  } else if (verbose_ == 2) {
    if (last && target_ && *target_ > 0) write_line(current, now, time_per_unit);
  }
  last_update_ = now;
}

TESSEL_INLINE double progbar::estimate_step_duration(std::size_t current, double now) {
  if (current == 0) return 0.0;
  double time_per_unit;
  if (time_after_first_step_ && current > 1) {
    time_per_unit = (now - *time_after_first_step_) / static_cast<double>(current - 1);
  } else {
    time_per_unit = (now - start_) / static_cast<double>(current);
  }
  if (current == 1) time_after_first_step_ = now;
  return time_per_unit;
}

TESSEL_INLINE std::string progbar::format_time(double time_per_unit, const std::string& unit_name) {
  using progbar_detail::py_format;
  if (time_per_unit >= 1 || time_per_unit == 0) {
    return " " + py_format(time_per_unit, 0, 'f') + "s/" + unit_name;
  }
  if (time_per_unit >= 1e-3) {
    return " " + py_format(time_per_unit * 1000.0, 0, 'f') + "ms/" + unit_name;
  }
  return " " + py_format(time_per_unit * 1000000.0, 0, 'f') + "us/" + unit_name;
}

TESSEL_INLINE std::string progbar::step_count(std::size_t current) const {
  const int digits = static_cast<int>(std::log10(static_cast<double>(*target_))) + 1;
  return progbar_detail::padded(current, digits) + "/" + std::to_string(*target_);
}

TESSEL_INLINE void progbar::write_bar(std::size_t current, double now, double time_per_unit,
                                      bool last) {
  using progbar_detail::printf_string;
  using progbar_detail::py_format;
  using progbar_detail::py_int;
  std::string message;
  // Characters of the ANSI codes, which take no room on screen.
  std::size_t special_char_len = 0;

  if (dynamic_display_) {
    message += std::string(prev_total_width_, '\b');
    message += '\r';
  } else {
    message += '\n';
  }

  const bool known = target_ && *target_ > 0;
  std::string bar;
  if (known) {
    bar = "\x1b[1m" + step_count(current) + "\x1b[0m ";
    special_char_len += 8;
    const double prog = static_cast<double>(current) / static_cast<double>(*target_);
    const auto prog_width = static_cast<long long>(width_ * prog);
    if (prog_width > 0) {
      bar += "\x1b[32m" + progbar_detail::repeat("━", prog_width) + "\x1b[0m";
      special_char_len += 9;
    }
    bar += "\x1b[37m" + progbar_detail::repeat("━", width_ - prog_width) + "\x1b[0m";
    special_char_len += 9;
  } else {
    bar = progbar_detail::padded(current, 7) + "/Unknown";
  }
  message += bar;

  std::string info;
  if (known && !last) {
    const double eta = time_per_unit * static_cast<double>(static_cast<long long>(*target_) -
                                                           static_cast<long long>(current));
    std::string eta_format;
    if (eta > 3600) {
      using progbar_detail::py_floordiv;
      using progbar_detail::py_mod;
      eta_format =
          printf_string("%lld:%02lld:%02lld", py_int(py_floordiv(eta, 3600)),
                        py_int(py_floordiv(py_mod(eta, 3600), 60)), py_int(py_mod(eta, 60)));
    } else if (eta > 60) {
      eta_format = printf_string("%lld:%02lld", py_int(progbar_detail::py_floordiv(eta, 60)),
                                 py_int(progbar_detail::py_mod(eta, 60)));
    } else {
      eta_format = printf_string("%llds", py_int(eta));
    }
    info = " \x1b[1m" + eta_format + "\x1b[0m";
  } else {
    info = " \x1b[1m" + py_format(now - start_, 0, 'f') + "s\x1b[0m";
  }
  special_char_len += 8;

  info += format_time(time_per_unit, unit_name_);

  for (const auto& name : order_) {
    info += " - " + name + ":";
    const double avg = average(name);
    info += ' ';  // appended in two steps: `" " + string&&` trips gcc 12's -Wrestrict at -O3
    info += py_format(avg, 4, std::abs(avg) > 1e-3 ? 'f' : 'e');
  }
  message += info;

  const std::size_t total_width =
      progbar_detail::code_points(bar) + progbar_detail::code_points(info) - special_char_len;
  if (prev_total_width_ > total_width) message += std::string(prev_total_width_ - total_width, ' ');
  if (last) message += '\n';

  *out_ << message << std::flush;
  prev_total_width_ = total_width;
}

TESSEL_INLINE void progbar::write_line(std::size_t current, double now, double time_per_unit) {
  using progbar_detail::py_format;
  std::string info = step_count(current);
  info += " - " + py_format(now - start_, 0, 'f') + "s";
  info += " -" + format_time(time_per_unit, unit_name_);
  for (const auto& name : order_) {
    info += " - " + name + ":";
    const double avg = average(name);
    // Keras tests avg > 1e-3 here, without the abs() of verbose 1: negative values print in
    // scientific notation.
    info += ' ';
    info += py_format(avg, 4, avg > 1e-3 ? 'f' : 'e');
  }
  info += '\n';
  *out_ << info << std::flush;
}
#endif

}  // namespace tessel
