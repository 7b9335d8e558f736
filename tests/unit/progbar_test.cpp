// tessel::progbar and tessel::progbar_logger against the bytes Keras 3.15.1
// writes. Every expected string below was produced by Keras itself
// (keras.utils.Progbar and keras.callbacks.ProgbarLogger driven with the same
// calls and a scripted time.time()), and the two transcripts at the end were
// captured from a real model.fit/evaluate/predict run with stdout sent to a
// file. They are written with a few tokens for the ANSI codes so that they stay
// readable; ansi() expands them and the comparison is on the exact bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tessel/trainer/logs.hpp>
#include <tessel/trainer/progbar.hpp>
#include <tessel/trainer/progbar_logger.hpp>
#include <vector>

namespace {

// <b> bold, </> reset, <green> / <white> bar colours, <bsN> N backspaces.
std::string ansi(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    auto take = [&](std::string_view token, std::string_view bytes) {
      if (!text.starts_with(token)) return false;
      out += bytes;
      text.remove_prefix(token.size());
      return true;
    };
    if (take("<b>", "\x1b[1m") || take("</>", "\x1b[0m") || take("<green>", "\x1b[32m") ||
        take("<white>", "\x1b[37m")) {
      continue;
    }
    if (text.starts_with("<bs")) {
      const auto end = text.find('>');
      out.append(std::stoul(std::string(text.substr(3, end - 3))), '\b');
      text.remove_prefix(end + 1);
      continue;
    }
    out += text.front();
    text.remove_prefix(1);
  }
  return out;
}

// A clock the test sets by hand, and a sink to read back.
struct bench {
  double now = 1000.0;
  std::ostringstream out;

  tessel::progbar bar(tessel::progbar_options options, bool dynamic) {
    options.out = &out;
    options.clock = [this] { return now; };
    options.dynamic_display = dynamic;
    return tessel::progbar(std::move(options));
  }
  tessel::progbar_logger logger(int verbose, std::size_t epochs, std::optional<std::size_t> steps,
                                bool dynamic) {
    return tessel::progbar_logger(
        verbose, epochs, steps,
        tessel::progbar_io{
            .out = &out, .clock = [this] { return now; }, .dynamic_display = dynamic});
  }
};

// fit as Keras's trainer drives the callbacks: batch logs are the running means
// so far, epoch logs the epoch's results plus val_* when validation ran (its
// own test events in between).
void run_fit(bench& b, tessel::progbar_logger& logger, std::size_t epochs, std::size_t batches,
             bool validation) {
  logger.on_train_begin();
  for (std::size_t e = 0; e < epochs; ++e) {
    b.now += 0.25;
    logger.on_epoch_begin(e);
    for (std::size_t i = 0; i < batches; ++i) {
      b.now += 0.25;
      logger.on_train_batch_end(i, {{"loss", 1.0 / static_cast<double>(i + 1 + e)},
                                    {"accuracy", 0.5 + 0.1 * static_cast<double>(i)}});
    }
    tessel::logs epoch_logs{{"loss", 0.75 - 0.25 * static_cast<double>(e)},
                            {"accuracy", 0.6 + 0.1 * static_cast<double>(e)}};
    if (validation) {
      logger.on_test_begin();
      for (std::size_t i = 0; i < 2; ++i) {
        b.now += 0.25;
        logger.on_test_batch_end(i, {{"loss", 9.0}});
      }
      logger.on_test_end({{"loss", 0.5}, {"accuracy", 0.625}});
      epoch_logs.emplace_back("val_loss", 0.5);
      epoch_logs.emplace_back("val_accuracy", 0.625);
    }
    b.now += 0.25;
    logger.on_epoch_end(e, epoch_logs);
  }
}

}  // namespace

TEST_CASE("progbar: verbose 1 redraws in place with backspaces and a carriage return",
          "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 3}, true);
  b.now = 1000.5;
  bar.update(1, {{"loss", 0.5}});
  b.now = 1000.7;
  bar.update(2, {{"loss", 0.3}});
  b.now = 1000.9;
  bar.update(3, {{"loss", 0.2}});
  CHECK(b.out.str() == ansi("\r<b>1/3</> <green>━━━━━━</><white>━━━━━━━━━━━━━━</> <b>1s</> "
                            "500ms/step - loss: "
                            "0.5000<bs53>\r<b>2/3</> <green>━━━━━━━━━━━━━</><white>━━━━━━━</> "
                            "<b>0s</> "
                            "200ms/step - loss: 0.4000<bs53>\r<b>3/3</> "
                            "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>1s</> 200ms/step - "
                            "loss: 0.2000\n"));
}

TEST_CASE(
    "progbar: verbose 1 without dynamic display starts every draw on a "
    "new line",
    "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 3}, false);
  b.now = 1000.5;
  bar.update(1, {{"loss", 0.5}});
  b.now = 1000.7;
  bar.update(2, {{"loss", 0.3}});
  b.now = 1000.9;
  bar.update(3, {{"loss", 0.2}});
  CHECK(b.out.str() == ansi("\n<b>1/3</> <green>━━━━━━</><white>━━━━━━━━━━━━━━</> <b>1s</> "
                            "500ms/step - loss: "
                            "0.5000\n<b>2/3</> <green>━━━━━━━━━━━━━</><white>━━━━━━━</> "
                            "<b>0s</> 200ms/step - "
                            "loss: 0.4000\n<b>3/3</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> "
                            "<b>1s</> "
                            "200ms/step - loss: 0.2000\n"));
}

TEST_CASE("progbar: Keras's display rule redraws in place on POSIX even into a file", "[progbar]") {
#if defined(__unix__) || defined(__APPLE__)
  CHECK(tessel::keras_dynamic_display());
  std::ostringstream sink;
  tessel::progbar bar(tessel::progbar_options{.target = 3, .out = &sink});
  CHECK(bar.dynamic_display());
#endif
}

TEST_CASE("progbar: verbose 2 writes one line when finalized", "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 32, .verbose = 2}, true);
  b.now = 1000.5;
  bar.update(1, {{"loss", 0.5}, {"acc", 0.25}});
  b.now = 1001.0;
  bar.update(31, {{"loss", 0.5}, {"acc", 0.25}});
  CHECK(b.out.str().empty());
  b.now = 1001.3;
  bar.update(32, {{"loss", -0.5}, {"acc", 0.75}});
  // Verbose 2 tests avg > 1e-3 without abs(): a negative value prints in
  // scientific notation.
  CHECK(b.out.str() == "32/32 - 1s - 26ms/step - loss: -5.0000e-01 - acc: 0.7500\n");
}

TEST_CASE("progbar: an unknown target shows the count over Unknown", "[progbar]") {
  bench b;
  auto bar = b.bar({.target = std::nullopt}, true);
  b.now = 1000.01;
  bar.update(1, {{"loss", 0.5}});
  b.now = 1000.2;
  bar.update(7, {{"loss", 0.5}});
  b.now = 1000.4;
  bar.update(7, {{"loss", 0.25}}, true);
  CHECK(b.out.str() == ansi("\r      1/Unknown <b>0s</> 10ms/step - loss: 0.5000<bs43>\r      "
                            "7/Unknown <b>0s</> 32ms/step - loss: 0.5000<bs43>\r      "
                            "7/Unknown <b>0s</> 65ms/step - loss: 0.2500\n"));
}

TEST_CASE("progbar: values of magnitude at most 1e-3 print as %.4e", "[progbar]") {
  SECTION("verbose 1") {
    bench b;
    auto bar = b.bar(
        {.target = 2, .stateful_metrics = std::set<std::string>{"a", "b", "c", "d", "e"}}, false);
    b.now = 1000.5;
    bar.update(2,
               {{"a", 0.00012345678}, {"b", 0.001}, {"c", 0.0010001}, {"d", 0.0}, {"e", -2.5e-7}});
    CHECK(b.out.str() == ansi("\n<b>2/2</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> "
                              "250ms/step - a: "
                              "1.2346e-04 - b: 1.0000e-03 - c: 0.0010 - d: 0.0000e+00 - e: "
                              "-2.5000e-07\n"));
  }
  SECTION("verbose 2") {
    bench b;
    auto bar = b.bar({.target = 2, .verbose = 2}, false);
    b.now = 1000.5;
    bar.update(2, {{"a", 0.00012345678}, {"b", 0.001}, {"c", 0.0010001}, {"d", 0.0}, {"e", -0.5}});
    CHECK(b.out.str() ==
          "2/2 - 0s - 250ms/step - a: 1.2346e-04 - b: 1.0000e-03 - c: 0.0010 - "
          "d: 0.0000e+00 - e: -5.0000e-01\n");
  }
  SECTION("NaN prints unsigned, infinities with their sign") {
    bench b;
    auto bar =
        b.bar({.target = 1, .stateful_metrics = std::set<std::string>{"a", "b", "c"}}, false);
    b.now = 1000.5;
    const double inf = std::numeric_limits<double>::infinity();
    bar.update(1, {{"a", -std::numeric_limits<double>::quiet_NaN()}, {"b", inf}, {"c", -inf}});
    CHECK(b.out.str() == ansi("\n<b>1/1</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> "
                              "500ms/step - a: nan - b: inf - c: -inf\n"));
  }
}

TEST_CASE("progbar: time per step in s, ms or us; shorter lines padded with spaces", "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 1000, .interval = 0}, false);
  b.now = 1000.0;
  bar.update(0);
  b.now = 1000.0004;
  bar.update(1);
  b.now = 1000.0104;
  bar.update(2);
  b.now = 1002.5104;
  bar.update(3);
  CHECK(b.out.str() == ansi("\n<b>   0/1000</> <white>━━━━━━━━━━━━━━━━━━━━</> <b>0s</> "
                            "0s/step\n<b>   1/1000</> "
                            "<white>━━━━━━━━━━━━━━━━━━━━</> <b>0s</> 400us/step\n<b>   2/1000</> "
                            "<white>━━━━━━━━━━━━━━━━━━━━</> <b>9s</> 10ms/step \n<b>   3/1000</> "
                            "<white>━━━━━━━━━━━━━━━━━━━━</> <b>20:51</> 1s/step"));
}

TEST_CASE(
    "progbar: ETA as seconds, m:ss or h:mm:ss; the first step leaves the "
    "step time",
    "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 10000, .interval = 0}, false);
  b.now = 1001.0;  // one second for step 1, then 4 ms for step 2: 4ms/step from
                   // there on
  bar.update(1);
  b.now = 1001.004;
  bar.update(2);
  b.now = 1001.5;
  bar.update(3);
  b.now = 1003.0;
  bar.update(4);
  b.now = 1002003.0;
  bar.update(5);
  CHECK(b.out.str() == ansi("\n<b>    1/10000</> <white>━━━━━━━━━━━━━━━━━━━━</> <b>2:46:39</> "
                            "1s/step\n<b>    "
                            "2/10000</> <white>━━━━━━━━━━━━━━━━━━━━</> <b>39s</> 4ms/step   "
                            "\n<b>    3/10000</> "
                            "<white>━━━━━━━━━━━━━━━━━━━━</> <b>41:39</> 250ms/step\n<b>    "
                            "4/10000</> "
                            "<white>━━━━━━━━━━━━━━━━━━━━</> <b>1:51:04</> 667ms/step\n<b>    "
                            "5/10000</> "
                            "<white>━━━━━━━━━━━━━━━━━━━━</> <b>694792:42:27</> 250250s/step"));
}

TEST_CASE(
    "progbar: names not stateful are averaged over steps, finalize shows "
    "the value given",
    "[progbar]") {
  bench b;
  auto bar =
      b.bar({.target = 10, .interval = 0, .stateful_metrics = std::set<std::string>{"acc"}}, false);
  b.now = 1000.1;
  bar.update(1, {{"loss", 1.0}, {"acc", 1.0}});
  b.now = 1000.2;
  // Covers steps 2 to 4: loss weighs three steps, (1 + 3 * 2) / 4 = 1.75.
  bar.update(4, {{"loss", 2.0}, {"acc", 0.5}});
  b.now = 1000.3;
  bar.update(10, {{"loss", 0.125}, {"acc", 0.25}});
  CHECK(b.out.str() == ansi("\n<b> 1/10</> <green>━━</><white>━━━━━━━━━━━━━━━━━━</> <b>0s</> "
                            "100ms/step - loss: "
                            "1.0000 - acc: 1.0000\n<b> 4/10</> "
                            "<green>━━━━━━━━</><white>━━━━━━━━━━━━</> "
                            "<b>0s</> 33ms/step - loss: 1.7500 - acc: 0.5000 \n<b>10/10</> "
                            "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 22ms/step - "
                            "loss: 0.1250 - acc: "
                            "0.2500\n"));
}

TEST_CASE("progbar: stateless_metrics averages only the names given", "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 4, .interval = 0, .stateless_metrics = std::set<std::string>{"loss"}},
                   false);
  bar.update(2, {{"loss", 1.0}, {"acc", 1.0}});
  bar.update(3, {{"loss", 4.0}, {"acc", 0.5}});
  // loss: (2 * 1 + 1 * 4) / 3; acc as given.
  CHECK(b.out.str().ends_with("- loss: 2.0000 - acc: 0.5000"));
  // Keras raises a ValueError when given both.
  CHECK_THROWS_AS(b.bar({.target = 4,
                         .stateful_metrics = std::set<std::string>{},
                         .stateless_metrics = std::set<std::string>{}},
                        false),
                  std::invalid_argument);
}

TEST_CASE("progbar: redraws closer than the interval are skipped unless finalizing", "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 5}, true);
  b.now = 1000.01;
  bar.update(1);
  b.now = 1000.04;
  bar.update(2);
  b.now = 1000.07;
  bar.update(3);
  b.now = 1000.08;
  bar.update(5);
  CHECK(b.out.str() == ansi("\r<b>1/5</> <green>━━━━</><white>━━━━━━━━━━━━━━━━</> <b>0s</> "
                            "10ms/step<bs37>\r<b>3/5</> "
                            "<green>━━━━━━━━━━━━</><white>━━━━━━━━</> <b>0s</> "
                            "30ms/step<bs37>\r<b>5/5</> "
                            "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 18ms/step\n"));
}

TEST_CASE("progbar: a shorter redraw is padded over the previous one", "[progbar]") {
  bench b;
  auto bar =
      b.bar({.target = 2, .interval = 0, .stateful_metrics = std::set<std::string>{"loss"}}, true);
  b.now = 1000.5;
  bar.update(1, {{"loss", 12345.5}});
  b.now = 1000.7;
  bar.update(2, {{"loss", 0.5}});
  CHECK(b.out.str() == ansi("\r<b>1/2</> <green>━━━━━━━━━━</><white>━━━━━━━━━━</> <b>0s</> "
                            "500ms/step - loss: "
                            "12345.5000<bs57>\r<b>2/2</> "
                            "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>1s</> "
                            "200ms/step - loss: 0.5000    \n"));
}

TEST_CASE("progbar: add() advances from the last step, with the unit name", "[progbar]") {
  bench b;
  auto bar = b.bar({.target = 4, .interval = 0, .unit_name = "sample"}, false);
  b.now = 1000.5;
  bar.add(2, {{"loss", 1.0}});
  b.now = 1001.0;
  bar.add(2, {{"loss", 0.5}});
  CHECK(b.out.str() == ansi("\n<b>2/4</> <green>━━━━━━━━━━</><white>━━━━━━━━━━</> <b>0s</> "
                            "250ms/sample - loss: "
                            "1.0000\n<b>4/4</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> "
                            "<b>1s</> 250ms/sample - "
                            "loss: 0.5000\n"));
}

TEST_CASE("progbar: logs helpers", "[progbar]") {
  tessel::logs entries{{"loss", 1.0}, {"accuracy", 0.5}, {"loss", 2.0}};
  CHECK(tessel::find_log(entries, "loss") == 2.0);
  CHECK_FALSE(tessel::find_log(entries, "mae").has_value());
  tessel::set_log(entries, "accuracy", 0.75);
  CHECK(entries[1].second == 0.75);
  CHECK(tessel::sorted_logs({{"val_loss", 3.0}, {"loss", 1.0}, {"Zeta", 4.0}, {"loss", 2.0}}) ==
        tessel::logs{{"Zeta", 4.0}, {"loss", 2.0}, {"val_loss", 3.0}});
}

TEST_CASE(
    "progbar: fit prints Epoch headers only for more than one epoch, "
    "val_ at epoch end",
    "[progbar]") {
  SECTION("two epochs with validation") {
    bench b;
    auto logger = b.logger(1, 2, 2, false);
    run_fit(b, logger, 2, 2, true);
    // Validation inside fit prints nothing; names are sorted, as Keras's
    // CallbackList sorts them.
    CHECK(b.out.str() == ansi("Epoch 1/2\n\n<b>1/2</> "
                              "<green>━━━━━━━━━━</><white>━━━━━━━━━━</> <b>0s</> "
                              "250ms/step - accuracy: 0.5000 - loss: 1.0000\n<b>2/2</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 250ms/step - "
                              "accuracy: 0.6000 - "
                              "loss: 0.5000\n<b>2/2</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>1s</> 1s/step "
                              "- accuracy: 0.6000 - loss: 0.7500 - val_accuracy: 0.6250 - "
                              "val_loss: 0.5000\nEpoch "
                              "2/2\n\n<b>1/2</> <green>━━━━━━━━━━</><white>━━━━━━━━━━</> "
                              "<b>0s</> 250ms/step - "
                              "accuracy: 0.5000 - loss: 0.5000\n<b>2/2</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 250ms/step - "
                              "accuracy: 0.6000 - "
                              "loss: 0.3333\n<b>2/2</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>1s</> 1s/step "
                              "- accuracy: 0.7000 - loss: 0.5000 - val_accuracy: 0.6250 - "
                              "val_loss: 0.5000\n"));
  }
  SECTION("one epoch: no header") {
    bench b;
    auto logger = b.logger(1, 1, 2, false);
    run_fit(b, logger, 1, 2, false);
    CHECK(b.out.str() == ansi("\n<b>1/2</> <green>━━━━━━━━━━</><white>━━━━━━━━━━</> <b>0s</> "
                              "250ms/step - "
                              "accuracy: 0.5000 - loss: 1.0000\n<b>2/2</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 250ms/step - "
                              "accuracy: 0.6000 - "
                              "loss: 0.5000\n<b>2/2</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>1s</> "
                              "500ms/step - accuracy: 0.6000 - loss: 0.7500\n"));
  }
  SECTION("verbose 2: one line per epoch") {
    bench b;
    auto logger = b.logger(2, 3, 2, false);
    run_fit(b, logger, 3, 2, true);
    CHECK(b.out.str() ==
          "Epoch 1/3\n2/2 - 1s - 625ms/step - accuracy: 0.6000 "
          "- loss: 0.7500 - val_accuracy: "
          "0.6250 - val_loss: 0.5000\nEpoch 2/3\n2/2 - 1s - "
          "625ms/step - accuracy: 0.7000 - loss: "
          "0.5000 - val_accuracy: 0.6250 - val_loss: "
          "0.5000\nEpoch 3/3\n2/2 - 1s - 625ms/step - "
          "accuracy: 0.8000 - loss: 0.2500 - val_accuracy: "
          "0.6250 - val_loss: 0.5000\n");
  }
  SECTION("verbose 0: nothing") {
    bench b;
    auto logger = b.logger(0, 2, 2, false);
    run_fit(b, logger, 2, 2, true);
    CHECK(b.out.str().empty());
  }
}

TEST_CASE("progbar: fit with unknown steps learns them at the end of the first epoch",
          "[progbar]") {
  SECTION("verbose 1") {
    bench b;
    auto logger = b.logger(1, 2, std::nullopt, false);
    run_fit(b, logger, 2, 3, false);
    CHECK(logger.target() == 3u);
    CHECK(b.out.str() == ansi("Epoch 1/2\n\n      1/Unknown <b>0s</> 250ms/step - accuracy: "
                              "0.5000 - loss: "
                              "1.0000\n      2/Unknown <b>0s</> 250ms/step - accuracy: 0.6000 - "
                              "loss: 0.5000\n    "
                              "  3/Unknown <b>1s</> 250ms/step - accuracy: 0.7000 - loss: "
                              "0.3333\n<b>3/3</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>1s</> 375ms/step - "
                              "accuracy: 0.6000 - "
                              "loss: 0.7500\nEpoch 2/2\n\n<b>1/3</> "
                              "<green>━━━━━━</><white>━━━━━━━━━━━━━━</> "
                              "<b>0s</> 250ms/step - accuracy: 0.5000 - loss: 0.5000\n<b>2/3</> "
                              "<green>━━━━━━━━━━━━━</><white>━━━━━━━</> <b>0s</> 250ms/step - "
                              "accuracy: 0.6000 - "
                              "loss: 0.3333\n<b>3/3</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> "
                              "<b>0s</> "
                              "250ms/step - accuracy: 0.7000 - loss: 0.2500\n<b>3/3</> "
                              "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>1s</> 375ms/step - "
                              "accuracy: 0.7000 - "
                              "loss: 0.5000\n"));
  }
  SECTION("verbose 2") {
    bench b;
    auto logger = b.logger(2, 2, std::nullopt, false);
    run_fit(b, logger, 2, 3, false);
    CHECK(b.out.str() ==
          "Epoch 1/2\n3/3 - 1s - 333ms/step - accuracy: 0.6000 "
          "- loss: 0.7500\nEpoch 2/2\n3/3 - "
          "1s - 333ms/step - accuracy: 0.7000 - loss: 0.5000\n");
  }
}

TEST_CASE("progbar: evaluate called by the user shows a bar and finalizes it", "[progbar]") {
  bench b;
  auto logger = b.logger(1, 1, 3, false);
  logger.on_test_begin();
  for (std::size_t i = 0; i < 3; ++i) {
    b.now += 0.25;
    logger.on_test_batch_end(
        i, {{"mae", 0.5 + static_cast<double>(i)}, {"loss", 0.25 * static_cast<double>(i)}});
  }
  b.now += 0.25;
  logger.on_test_end({{"mae", 1.5}, {"loss", 0.25}});
  CHECK(b.out.str() == ansi("\n<b>1/3</> <green>━━━━━━</><white>━━━━━━━━━━━━━━</> <b>0s</> "
                            "250ms/step - loss: "
                            "0.0000e+00 - mae: 0.5000\n<b>2/3</> "
                            "<green>━━━━━━━━━━━━━</><white>━━━━━━━</> "
                            "<b>0s</> 250ms/step - loss: 0.2500 - mae: 1.5000    \n<b>3/3</> "
                            "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 250ms/step - "
                            "loss: 0.5000 - mae: "
                            "2.5000\n<b>3/3</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> "
                            "<b>1s</> 375ms/step - "
                            "loss: 0.2500 - mae: 1.5000\n"));
}

TEST_CASE("progbar: predict shows the step time only", "[progbar]") {
  bench b;
  auto logger = b.logger(1, 1, 2, false);
  logger.on_predict_begin();
  for (std::size_t i = 0; i < 2; ++i) {
    b.now += 0.02;
    logger.on_predict_batch_end(i);
  }
  b.now += 0.02;
  logger.on_predict_end();
  CHECK(b.out.str() == ansi("\n<b>1/2</> <green>━━━━━━━━━━</><white>━━━━━━━━━━</> <b>0s</> "
                            "20ms/step\n<b>2/2</> "
                            "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 40ms/step\n"));
}

// Captured from Keras 3.15.1 (JAX backend): Dense(1) on 40 samples, batch_size
// 8, mse loss with an mae metric, fit(epochs=2, validation_data=...), then
// evaluate and predict(batch_size=16), stdout sent to a file, time.time() in
// keras.src.utils.progbar replaced by a clock that gains 0.0123 s per call.
// Batches 2 to 5 fall inside the 0.05 s interval, so only their values'
// presence matters; the values passed are those Keras showed.
namespace {
std::string keras_transcript(int verbose) {
  std::ostringstream out;
  double now = 1000.0;
  const tessel::progbar_io io{
      .out = &out, .clock = [&now] { return now += 0.0123; }, .dynamic_display = true};
  tessel::progbar_logger fit(verbose, 2, 5, io);
  fit.on_train_begin();
  const tessel::logs batch_logs[] = {{{"loss", 0.5837}, {"mae", 0.6970}},
                                     {{"loss", 0.4198}, {"mae", 0.4942}}};
  const tessel::logs epoch_logs[] = {
      {{"loss", 0.6895}, {"mae", 0.7221}, {"val_loss", 0.5037}, {"val_mae", 0.6054}},
      {{"loss", 0.5494}, {"mae", 0.6298}, {"val_loss", 0.3952}, {"val_mae", 0.5238}}};
  for (std::size_t e = 0; e < 2; ++e) {
    fit.on_epoch_begin(e);
    for (std::size_t i = 0; i < 5; ++i) fit.on_train_batch_end(i, batch_logs[e]);
    fit.on_test_begin();
    for (std::size_t i = 0; i < 2; ++i) fit.on_test_batch_end(i, {{"loss", 1.0}, {"mae", 1.0}});
    fit.on_test_end({{"loss", 1.0}, {"mae", 1.0}});
    fit.on_epoch_end(e, epoch_logs[e]);
  }
  tessel::progbar_logger evaluate(verbose, 1, 5, io);
  evaluate.on_test_begin();
  for (std::size_t i = 0; i < 5; ++i)
    evaluate.on_test_batch_end(i, {{"loss", 0.5724}, {"mae", 0.6520}});
  evaluate.on_test_end({{"loss", 0.4840}, {"mae", 0.5827}});
  tessel::progbar_logger predict(verbose, 1, 3, io);
  predict.on_predict_begin();
  for (std::size_t i = 0; i < 3; ++i) predict.on_predict_batch_end(i);
  predict.on_predict_end();
  return out.str();
}
}  // namespace

TEST_CASE(
    "progbar: byte for byte as Keras 3.15.1's fit, evaluate and predict, "
    "verbose 1",
    "[progbar]") {
  CHECK(keras_transcript(1) ==
        ansi("Epoch 1/2\n\r<b>1/5</> <green>━━━━</><white>━━━━━━━━━━━━━━━━</> "
             "<b>0s</> 12ms/step "
             "- loss: 0.5837 - mae: 0.6970<bs66>\r<b>5/5</> "
             "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 15ms/step - loss: "
             "0.6895 - mae: "
             "0.7221 - val_loss: 0.5037 - val_mae: 0.6054\nEpoch 2/2\n\r<b>1/5</> "
             "<green>━━━━</><white>━━━━━━━━━━━━━━━━</> <b>0s</> 12ms/step - loss: "
             "0.4198 - mae: "
             "0.4942<bs66>\r<b>5/5</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> "
             "<b>0s</> "
             "15ms/step - loss: 0.5494 - mae: 0.6298 - val_loss: 0.3952 - "
             "val_mae: "
             "0.5238\n\r<b>1/5</> <green>━━━━</><white>━━━━━━━━━━━━━━━━</> "
             "<b>0s</> 12ms/step - "
             "loss: 0.5724 - mae: 0.6520<bs66>\r<b>5/5</> "
             "<green>━━━━━━━━━━━━━━━━━━━━</><white></> <b>0s</> 15ms/step - loss: "
             "0.4840 - mae: "
             "0.5827\n\r<b>1/3</> <green>━━━━━━</><white>━━━━━━━━━━━━━━</> "
             "<b>0s</> "
             "12ms/step<bs37>\r<b>3/3</> <green>━━━━━━━━━━━━━━━━━━━━</><white></> "
             "<b>0s</> "
             "18ms/step\n"));
}

TEST_CASE(
    "progbar: byte for byte as Keras 3.15.1's fit, evaluate and predict, "
    "verbose 2",
    "[progbar]") {
  CHECK(keras_transcript(2) ==
        "Epoch 1/2\n5/5 - 0s - 2ms/step - loss: 0.6895 - mae: 0.7221 - "
        "val_loss: 0.5037 - "
        "val_mae: 0.6054\nEpoch 2/2\n5/5 - 0s - 2ms/step - loss: 0.5494 - mae: "
        "0.6298 - val_loss: "
        "0.3952 - val_mae: 0.5238\n5/5 - 0s - 2ms/step - loss: 0.4840 - mae: "
        "0.5827\n3/3 - 0s - "
        "4ms/step\n");
}

TEST_CASE("progbar: Keras's positional arguments, then sink, clock and redraw mode", "[progbar]") {
  std::ostringstream out;
  double now = 1000.0;
  tessel::progbar bar(
      4, 10, 2, 0.05, {"acc"}, "batch", out, [&now] { return now; }, false);
  now = 1001.0;
  bar.add(2, {{"loss", 1.0}, {"acc", 0.5}});
  now = 1002.0;
  bar.add(2, {{"loss", 0.5}, {"acc", 0.25}});
  CHECK(bar.target() == 4u);
  CHECK(out.str() == "4/4 - 2s - 500ms/batch - loss: 0.5000 - acc: 0.2500\n");
}

// tests/golden/progress_verbose2.bin (Keras 3.15.1, fit(epochs=2, verbose=2,
// validation_data=...) on a real clock), replayed with a clock chosen to give
// the step times Keras printed.
TEST_CASE("progbar: byte for byte as a Keras 3.15.1 verbose 2 fit on a real clock", "[progbar]") {
  std::ostringstream out;
  std::vector<double> times{1000.0, 1000.0 + 8 * 0.168, 1100.0, 1100.0 + 8 * 0.076};
  std::size_t next = 0;
  tessel::progbar_logger logger(
      2, 2, 8,
      {.out = &out, .clock = [&] { return times.at(next++); }, .dynamic_display = std::nullopt});
  const tessel::logs epoch_logs[] = {{{"loss", 1.2397},
                                      {"sparse_categorical_accuracy", 0.3125},
                                      {"val_loss", 1.3903},
                                      {"val_sparse_categorical_accuracy", 0.25}},
                                     {{"loss", 1.2263},
                                      {"sparse_categorical_accuracy", 0.3125},
                                      {"val_loss", 1.3727},
                                      {"val_sparse_categorical_accuracy", 0.25}}};
  logger.on_train_begin();
  for (std::size_t e = 0; e < 2; ++e) {
    logger.on_epoch_begin(e);
    for (std::size_t i = 0; i < 8; ++i) logger.on_train_batch_end(i, {{"loss", 9.0}});
    logger.on_epoch_end(e, epoch_logs[e]);
  }
  CHECK(out.str() ==
        "Epoch 1/2\n8/8 - 1s - 168ms/step - loss: 1.2397 - "
        "sparse_categorical_accuracy: 0.3125 - "
        "val_loss: 1.3903 - val_sparse_categorical_accuracy: "
        "0.2500\nEpoch 2/2\n8/8 - 1s - "
        "76ms/step - loss: 1.2263 - sparse_categorical_accuracy: "
        "0.3125 - val_loss: 1.3727 - "
        "val_sparse_categorical_accuracy: 0.2500\n");
}
