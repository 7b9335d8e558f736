// The model API's callbacks as a Keras user meets them: lambda_callback's hooks in Keras's order, a
// callback subclass, early_stopping, terminate_on_nan and csv_logger.
#include <catch2/catch.hpp>

#include "model_test_helpers.hpp"

TEST_CASE("callbacks: lambda_callback hooks run in Keras's order", "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  std::vector<std::string> events;
  tessel::callbacks::lambda_callback recorder({
      .on_epoch_begin =
          [&](std::size_t e, const tessel::logs&) {
            events.push_back("epoch_begin " + std::to_string(e));
          },
      .on_epoch_end =
          [&](std::size_t e, const tessel::logs& l) {
            events.push_back("epoch_end " + std::to_string(e));
            CHECK(names_of(l) ==
                  std::vector<std::string>{"accuracy", "loss", "val_accuracy", "val_loss"});
          },
      .on_batch_begin =
          [&](std::size_t b, const tessel::logs&) {
            events.push_back("batch_begin " + std::to_string(b));
          },
      .on_batch_end =
          [&](std::size_t b, const tessel::logs& l) {
            events.push_back("batch_end " + std::to_string(b));
            CHECK(tessel::find_log(l, "loss").has_value());
          },
      .on_train_begin = [&](const tessel::logs&) { events.push_back("train_begin"); },
      .on_train_end = [&](const tessel::logs&) { events.push_back("train_end"); },
  });
  // 20 samples in batches of 8: batches 0, 1, 2 each epoch.
  model.fit(
      blob_dataset(20, 1, 8),
      {.epochs = 2, .verbose = 0, .callbacks = {recorder}, .validation_data = blob_dataset(8, 2)});
  std::vector<std::string> expected{"train_begin"};
  for (std::size_t e = 0; e < 2; ++e) {
    expected.push_back("epoch_begin " + std::to_string(e));
    for (std::size_t b = 0; b < 3; ++b) {
      expected.push_back("batch_begin " + std::to_string(b));
      expected.push_back("batch_end " + std::to_string(b));
    }
    expected.push_back("epoch_end " + std::to_string(e));
  }
  expected.push_back("train_end");
  CHECK(events == expected);

  // A temporary callback is owned by the list; hooks left empty are skipped.
  std::size_t ends = 0;
  model.fit(blob_dataset(20, 1, 8),
            {.epochs = 3,
             .verbose = 0,
             .callbacks = {tessel::callbacks::lambda_callback(
                 {.on_epoch_end = [&](std::size_t, const tessel::logs&) { ++ends; }})}});
  CHECK(ends == 3);
}

namespace {
// A user's callback: every hook counted, training stopped after `stop_after` batches.
class counting_callback : public tessel::callback {
 public:
  explicit counting_callback(std::size_t stop_after) : stop_after_(stop_after) {}
  std::map<std::string, std::size_t> calls;
  void on_train_begin(const tessel::logs&) override { ++calls["train_begin"]; }
  void on_train_end(const tessel::logs&) override { ++calls["train_end"]; }
  void on_epoch_begin(std::size_t, const tessel::logs&) override { ++calls["epoch_begin"]; }
  void on_epoch_end(std::size_t, const tessel::logs&) override { ++calls["epoch_end"]; }
  void on_train_batch_begin(std::size_t, const tessel::logs&) override { ++calls["batch_begin"]; }
  void on_train_batch_end(std::size_t, const tessel::logs&) override {
    if (++calls["batch_end"] == stop_after_) model->stop_training = true;
  }
  void on_test_begin(const tessel::logs&) override { ++calls["test_begin"]; }
  void on_test_end(const tessel::logs&) override { ++calls["test_end"]; }
  void on_test_batch_begin(std::size_t, const tessel::logs&) override {
    ++calls["test_batch_begin"];
  }
  void on_test_batch_end(std::size_t, const tessel::logs&) override { ++calls["test_batch_end"]; }

 private:
  std::size_t stop_after_;
};
}  // namespace

TEST_CASE("callbacks: a callback subclass sees every hook and can set stop_training",
          "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  const auto train = blob_dataset(48, 1, 8);  // 6 batches an epoch
  const auto val = blob_dataset(24, 2, 8);    // 3 batches
  counting_callback all(1000);
  model.fit(train, {.epochs = 2, .verbose = 0, .callbacks = {all}, .validation_data = val});
  CHECK(all.calls == std::map<std::string, std::size_t>{{"batch_begin", 12},
                                                        {"batch_end", 12},
                                                        {"epoch_begin", 2},
                                                        {"epoch_end", 2},
                                                        {"test_batch_begin", 6},
                                                        {"test_batch_end", 6},
                                                        {"test_begin", 2},
                                                        {"test_end", 2},
                                                        {"train_begin", 1},
                                                        {"train_end", 1}});
  CHECK_FALSE(model.stop_training);

  // Stopping in the eighth batch ends the second epoch there; the epoch still ends (history
  // and validation included), and no third epoch starts.
  counting_callback stopper(8);
  const tessel::history h =
      model.fit(train, {.epochs = 5, .verbose = 0, .callbacks = {stopper}, .validation_data = val});
  CHECK(model.stop_training);
  CHECK(stopper.calls["batch_end"] == 8);
  CHECK(stopper.calls["epoch_begin"] == 2);
  CHECK(stopper.calls["epoch_end"] == 2);
  CHECK(stopper.calls["test_begin"] == 2);
  CHECK(stopper.calls["train_end"] == 1);
  CHECK(h.epoch == std::vector<std::size_t>{0, 1});
  // The next fit starts again.
  model.fit(train, {.epochs = 1, .verbose = 0});
  CHECK_FALSE(model.stop_training);
}

TEST_CASE("callbacks: early_stopping stops, and restores the best epoch's weights", "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model, tessel::optimizers::adam{.learning_rate = 0.01});
  const auto train = blob_dataset(96, 1);
  // From epoch 2 on, each epoch starts from weights 30 times too large: its loss is far worse
  // than epoch 1's, and a few Adam steps do not repair that.
  std::vector<tessel::array<float>> bad = model.get_weights();
  for (auto& w : bad)
    for (float& v : w) v = v * 30.0f + 0.5f;
  std::vector<std::vector<tessel::array<float>>> at_epoch_end;
  tessel::callbacks::lambda_callback sabotage({
      .on_epoch_begin =
          [&](std::size_t e, const tessel::logs&) {
            if (e >= 2) model.set_weights(bad);
          },
      .on_epoch_end = [&](std::size_t,
                          const tessel::logs&) { at_epoch_end.push_back(model.get_weights()); },
  });
  tessel::callbacks::early_stopping stop(
      {.monitor = "loss", .patience = 2, .restore_best_weights = true});
  const tessel::history h =
      model.fit(train, {.epochs = 10, .verbose = 0, .callbacks = {sabotage, stop}});
  const auto& loss = h.history.at("loss");
  INFO("losses " << Catch::Detail::stringify(loss));
  REQUIRE(loss.size() == 4);
  CHECK(loss[1] < loss[0]);
  CHECK(loss[2] > loss[1]);
  CHECK(loss[3] > loss[1]);
  CHECK(stop.stopped_epoch == 3);
  CHECK(stop.best_epoch == 1);
  REQUIRE(stop.best.has_value());
  CHECK(*stop.best == loss[1]);
  REQUIRE(at_epoch_end.size() == 4);
  CHECK(model.get_weights() == at_epoch_end[1]);
  CHECK(model.get_weights() != at_epoch_end[3]);

  // Without restore_best_weights the weights stay those of the last epoch.
  at_epoch_end.clear();
  tessel::callbacks::early_stopping keep({.monitor = "loss", .patience = 2});
  model.fit(train, {.epochs = 10, .verbose = 0, .callbacks = {sabotage, keep}});
  REQUIRE_FALSE(at_epoch_end.empty());
  CHECK(model.get_weights() == at_epoch_end.back());
}

TEST_CASE("callbacks: early_stopping on val_loss, min_delta, verbose, a missing monitor",
          "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  const auto train = blob_dataset(48, 1);
  const auto val = blob_dataset(24, 2);
  // No epoch improves val_loss by 100: the first is the best, and with patience 1 the second
  // stops training.
  tessel::callbacks::early_stopping stop({.min_delta = 100, .patience = 1, .verbose = 1});
  std::string text;
  tessel::history h;
  {
    capture out;
    h = model.fit(train, {.epochs = 6, .verbose = 0, .callbacks = {stop}, .validation_data = val});
    text = out.text();
  }
  CHECK(h.history.at("val_loss").size() == 2);
  CHECK(stop.stopped_epoch == 1);
  CHECK(stop.best_epoch == 0);
  CHECK(text == "Epoch 2: early stopping\n");

  // patience 0 still lets the first epoch pass (Keras stops only after epoch 0).
  tessel::callbacks::early_stopping eager({.monitor = "val_loss", .min_delta = 100});
  h = model.fit(train, {.epochs = 6, .verbose = 0, .callbacks = {eager}, .validation_data = val});
  CHECK(h.epoch == std::vector<std::size_t>{0, 1});

  // A metric that is larger when better is detected from the compiled metrics.
  tessel::callbacks::early_stopping acc({.monitor = "val_accuracy", .patience = 1});
  h = model.fit(train, {.epochs = 4, .verbose = 0, .callbacks = {acc}, .validation_data = val});
  REQUIRE(acc.best.has_value());
  const auto& va = h.history.at("val_accuracy");
  CHECK(*acc.best == *std::max_element(va.begin(), va.end()));

  // Monitoring a log that is not there warns, and training goes on.
  tessel::callbacks::early_stopping missing({.monitor = "val_loss", .patience = 0});
  {
    capture err(std::cerr);
    h = model.fit(train, {.epochs = 3, .verbose = 0, .callbacks = {missing}});
    text = err.text();
  }
  CHECK(h.epoch.size() == 3);
  CHECK_THAT(text, Contains("Early stopping conditioned on metric `val_loss` which is not "
                            "available. Available metrics are: accuracy,loss"));

  CHECK_THROWS_WITH(tessel::callbacks::early_stopping({.mode = "up"}),
                    Contains("EarlyStopping mode up is unknown"));
}

TEST_CASE("callbacks: terminate_on_nan stops after the first bad batch", "[callbacks]") {
  seed_scope s(3);
  {
    // NaN in the first batch's inputs: the loss of batch 0 is NaN (relu passes NaN on, as in
    // Keras).
    blob_model model;
    compile_blob(model);
    blobs data = make_blobs(48, 1);
    data.x.values[5] = std::nanf("");
    std::size_t batches = 0;
    tessel::callbacks::lambda_callback count(
        {.on_batch_end = [&](std::size_t, const tessel::logs&) { ++batches; }});
    std::string text;
    tessel::history h;
    {
      capture out;
      h = model.fit(
          tessel::from_tensor_slices(data.x, data.y).batch(8),
          {.epochs = 3, .verbose = 0, .callbacks = {tessel::callbacks::terminate_on_nan(), count}});
      text = out.text();
    }
    CHECK(text == "Batch 0: Invalid loss, terminating training\n");
    CHECK(batches == 1);
    REQUIRE(h.history.at("loss").size() == 1);
    CHECK(std::isnan(h.history.at("loss")[0]));
  }
  {
    // A learning rate of 1e30 on mean squared error: the loss overflows a few batches in.
    tessel::sequential<input<4>, dense<3>> model;
    model.compile(tessel::optimizers::sgd{.learning_rate = 1e30},
                  tessel::losses::mean_squared_error{});
    const blobs data = make_blobs(160, 1);
    const auto ds =
        tessel::from_tensor_slices(data.x, tessel::data::to_categorical(data.y, 3)).batch(8);
    std::string text;
    tessel::history h;
    {
      capture out;
      h = model.fit(
          ds, {.epochs = 2, .verbose = 0, .callbacks = {tessel::callbacks::terminate_on_nan()}});
      text = out.text();
    }
    std::smatch m;
    REQUIRE(std::regex_match(text, m,
                             std::regex(R"(Batch (\d+): Invalid loss, terminating training\n)")));
    CHECK(std::stoul(m[1]) < 20);  // within the first epoch
    CHECK(h.epoch.size() == 1);
    CHECK_FALSE(std::isfinite(h.history.at("loss")[0]));
  }
}

TEST_CASE("callbacks: csv_logger writes a header and one row per epoch, and appends",
          "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  const auto train = blob_dataset(48, 1);
  const auto val = blob_dataset(24, 2);
  const temp_path file("log.csv");
  auto read_lines = [&] {
    std::ifstream in(file.path());
    REQUIRE(in.good());
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const tessel::history h =
      model.fit(train, {.epochs = 3,
                        .verbose = 0,
                        .callbacks = {tessel::callbacks::csv_logger(file.str())},
                        .validation_data = val});
  auto lines = read_lines();
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "epoch,accuracy,loss,val_accuracy,val_loss");
  const std::vector<std::string> keys{"accuracy", "loss", "val_accuracy", "val_loss"};
  for (std::size_t e = 0; e < 3; ++e) {
    INFO("row " << lines[e + 1]);
    std::istringstream row(lines[e + 1]);
    std::string cell;
    std::getline(row, cell, ',');
    CHECK(cell == std::to_string(e));
    for (const auto& k : keys) {
      REQUIRE(std::getline(row, cell, ','));
      // Python's repr of a float: reads back to the same double.
      CHECK(std::stod(cell) == h.history.at(k)[e]);
    }
    CHECK_FALSE(std::getline(row, cell, ','));
  }

  // append: more rows, no second header; epochs count from 0 again, as in Keras.
  model.fit(train, {.epochs = 2,
                    .verbose = 0,
                    .callbacks = {tessel::callbacks::csv_logger(file.str(), ",", true)},
                    .validation_data = val});
  lines = read_lines();
  REQUIRE(lines.size() == 6);
  CHECK(lines[0] == "epoch,accuracy,loss,val_accuracy,val_loss");
  CHECK(lines[4].starts_with("0,"));
  CHECK(lines[5].starts_with("1,"));

  // Without append the file starts over; another separator.
  model.fit(
      train,
      {.epochs = 1, .verbose = 0, .callbacks = {tessel::callbacks::csv_logger(file.str(), ";")}});
  lines = read_lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "epoch;accuracy;loss");
  CHECK(lines[1].starts_with("0;"));

  // append to a file that does not exist yet writes the header.
  const temp_path fresh("fresh.csv");
  model.fit(train, {.epochs = 1,
                    .verbose = 0,
                    .callbacks = {tessel::callbacks::csv_logger(fresh.str(), ",", true)}});
  std::ifstream in(fresh.path());
  std::string first;
  std::getline(in, first);
  CHECK(first == "epoch,accuracy,loss");

  const temp_path nowhere("no_such_dir/log.csv");
  CHECK_THROWS_WITH(model.fit(train, {.epochs = 1,
                                      .verbose = 0,
                                      .callbacks = {tessel::callbacks::csv_logger(nowhere.str())}}),
                    Contains("CSVLogger: cannot open"));
}

// ---- errors ------------------------------------------------------------------------------------
