// Asynchronous training with parameter servers (ps.hpp), every task this program, started by
// scripts/ps_cluster.sh with its TF_CONFIG. argv[1] says what the chief checks:
//   equal     1 worker, 2 ps: with one worker the updates are sequential (staleness 0), so the
//             variables, partitioned over the ps tasks, end as one device's trained on the same
//             batches in the same order; every batch trained once, each ps applied each once.
//   failures  2 workers, 2 ps, --respawn: worker 1 is killed (SIGKILL) right after it pushed its
//             3rd batch, before it reported it; the chief gives the batch to another worker, the
//             ps tasks refuse its second push, worker 1 starts again and rejoins; every batch is
//             trained exactly once (the trained indices are 0..N-1, each ps applied N updates).
//   ps_lost   1 worker, 2 ps: ps 1 is killed 2 s in; the chief ends the job with a message
//             naming ps 1 and its address (checked by the CMake script).
//   resume    1 worker, 2 ps, a backup_dir (argv[2]): the first run's chief is killed after
//             epoch 2's backup; run again, it restores the variables and Adam's slots into the
//             ps tasks and trains epoch 3, ending equal to one device's 3 uninterrupted epochs,
//             with batches 64..95 trained in the second run, each once.
//   ps_restarted  1 worker, 2 ps, --respawn, a backup_dir: ps 1 is killed 1 s in and started
//             again; the chief gives every ps the last backup's state and training goes on,
//             ending equal to one device's 4 epochs, every batch trained once.
//   stalled   2 workers, 1 ps: worker 1 stops itself (SIGSTOP) at its 3rd batch; the chief finds
//             it lost after worker_timeout and gives its batch to worker 0; every batch once.
//   chief_lost  1 worker, 1 ps: the chief is killed 1 s in; the worker and the ps end on their
//             own within chief_timeout (10 s), saying why (checked by the CMake script).
//   unreachable  run as a worker whose ps tasks do not exist: it gives up after 1 s, naming
//             the ps and its address.
//   port_in_use  run as ps 0 whose port this process holds already: refused, naming the task and
//             the address.
//   nan       1 worker, 1 ps: batch 5 holds a NaN; the worker pushes nothing for it and the
//             chief ends fit after that epoch with TerminateOnNaN's message; the variables stay
//             finite.
//   user_optimizer  1 worker, 2 ps: a user's optimizer (Signum), registered in the program,
//             applied by the ps tasks; 2 epochs equal one device.
//   clipped  1 worker, 2 ps: Adam with clipnorm, each variable's gradient clipped by its whole
//             norm by the worker (the ps tasks hold shards), and an ExponentialDecay schedule,
//             which the ps tasks make from the chief's description; 2 epochs equal one device's
//             and differ from the unclipped run.
//   accumulated  1 worker, 2 ps: Adam with gradient_accumulation_steps 2, the ps tasks updating
//             every second push; 2 epochs equal one device's. A model whose optimizer has use_ema,
//             or clips by norm and accumulates, is refused by the coordinator, saying why.
//   other_model  2 workers, 1 ps: worker 1 is built with another model; the chief refuses it when
//             it joins, naming the variable that differs, and worker 0 trains every batch.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <tessel/ps.hpp>
#include <tessel/tessel.hpp>
#include <thread>
#include <vector>

#include "../support/user_optimizers.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using model_t = sequential<one_device, input<12>, dense<32, {.activation = "relu"}>,
                           dense<4, {.activation = "softmax"}>>;
using dataset_t = dataset<float, std::int32_t>;

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

// 512 samples of 12 features and a label from 4 classes, the same on every task; with
// `nan_batch`, not shuffled and one sample of that batch NaN.
dataset_t make_dataset(std::optional<std::size_t> nan_batch = std::nullopt) {
  array<float> x({512, 12});
  array<std::int32_t> y({512});
  for (std::size_t i = 0; i < 512; ++i) {
    float s = 0;
    for (std::size_t j = 0; j < 12; ++j) {
      const float v = std::sin(0.37f * static_cast<float>(i * 12 + j));
      x.values[i * 12 + j] = v;
      s += v * static_cast<float>(j % 3);
    }
    y.values[i] = static_cast<std::int32_t>(static_cast<int>(std::fabs(s) * 3.0f) % 4);
  }
  if (nan_batch) {
    x.values[*nan_batch * 16 * 12 + 3] = std::numeric_limits<float>::quiet_NaN();
    return from_tensor_slices(std::move(x), std::move(y)).batch(16);
  }
  return from_tensor_slices(std::move(x), std::move(y)).shuffle(512, 7).batch(16);
}

// Worker 1 of the other_model mode: built with another model (a narrower hidden layer); the
// chief refuses it when it joins, and serve() throws the chief's reason.
int serve_other_model(ps::parameter_server_strategy& strategy) {
  using other_t = sequential<one_device, input<12>, dense<16, {.activation = "relu"}>,
                             dense<4, {.activation = "softmax"}>>;
  other_t other;
  other.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
  ps::cluster_coordinator<other_t, dataset_t> coord(strategy, other);
  coord.create_per_worker_dataset([] { return make_dataset(); });
  return coord.serve();
}

double worst_difference(const std::vector<array<float>>& a, const std::vector<array<float>>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].values.size(); ++k)
      worst = std::max(worst, std::fabs(static_cast<double>(a[i].values[k]) - b[i].values[k]) /
                                  std::max(1e-3, std::fabs(static_cast<double>(b[i].values[k]))));
  return worst;
}

// The worst relative difference between the model's weights and one device's trained from
// `initial` for `epochs` epochs of the dataset (the order one worker trains them in).
double against_one_device(const model_t& model, const std::vector<array<float>>& initial,
                          int epochs, optimizer_spec optimizer = "adam") {
  model_t reference;
  reference.compile({.optimizer = optimizer, .loss = "sparse_categorical_crossentropy"});
  reference.set_weights(initial);
  const dataset_t ds = make_dataset();
  for (int epoch = 0; epoch < epochs; ++epoch)
    for (const auto& [x, y] : ds) reference.train_on_batch(x, y);
  return worst_difference(model.get_weights(), reference.get_weights());
}

// The chief's checks that every batch was trained exactly once, and (ps_counts) that each ps
// applied one update per batch (not after a ps was restored: the others count the batches
// since the backup twice, as they were trained again).
void exactly_once(ps::cluster_coordinator<model_t, dataset_t>& coord, std::size_t n,
                  bool ps_counts = true) {
  const ps::coordinator_stats& s = coord.stats();
  std::vector<std::uint64_t> trained = s.trained;
  std::sort(trained.begin(), trained.end());
  bool once = trained.size() == n;
  for (std::size_t i = 0; once && i < n; ++i) once = trained[i] == i;
  check(once, "the chief's trained batches are 0.." + std::to_string(n - 1) + ", each once (" +
                  std::to_string(s.trained.size()) + " reported)");
  for (std::size_t p = 0; ps_counts && p < s.ps_applied.size(); ++p)
    check(s.ps_applied[p] == n, "ps " + std::to_string(p) + " applied " +
                                    std::to_string(s.ps_applied[p]) + " updates, one per batch");
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "equal";
  const bool restarted = std::getenv("TESSEL_RESTARTED") != nullptr &&
                         std::string(std::getenv("TESSEL_RESTARTED")) == "1";
  // Each task is a process of its own (no mpiexec): the runtime starts as a job of one.
  tessel::initialize guard(argc, argv);
  try {
    ps::strategy_options options{.variable_partitioner = ps::fixed_shards_partitioner{2}};
    options.worker_timeout = std::chrono::milliseconds(1500);
    options.ps_timeout = std::chrono::milliseconds(5000);
    options.chief_timeout = std::chrono::milliseconds(10000);
    if (mode == "unreachable") options.connect_timeout = std::chrono::milliseconds(1000);
    ps::parameter_server_strategy strategy(ps::cluster_from_environment(), options);
    if (mode == "port_in_use") {
      // Another process's socket on the ps's port (here this process's own, bound first).
      zmq::context_t ctx(1);
      zmq::socket_t holder(ctx, zmq::socket_type::router);
      ps::quiet(holder);
      holder.bind(ps::bind_endpoint(strategy.cluster().address()));
      (void)ps::serve_ps(strategy.cluster());
      check(false, "a ps on a port in use is refused");
      return 1;
    }
    model_t model;
    // user_optimizer: a user's optimizer (user_optimizers.hpp), which every task of this program
    // registers: the ps tasks make it from the chief's description by its class name.
    const optimizer_spec compiled =
        mode == "user_optimizer" ? optimizer_spec(user::signum{.learning_rate = 0.005})
        : mode == "clipped"
            ? optimizer_spec(optimizers::adam{
                  .learning_rate =
                      optimizers::schedules::exponential_decay{
                          .initial_learning_rate = 0.002, .decay_steps = 16, .decay_rate = 0.5},
                  .clipnorm = 0.05})
        : mode == "accumulated" ? optimizer_spec(optimizers::adam{.gradient_accumulation_steps = 2})
                                : optimizer_spec("adam");
    model.compile({.optimizer = compiled, .loss = "sparse_categorical_crossentropy"});
    const std::vector<array<float>> initial = model.get_weights();
    if (mode == "other_model" && strategy.task_type() == ps::role::worker &&
        strategy.task_index() == 1)
      return serve_other_model(strategy);
    ps::cluster_coordinator<model_t, dataset_t> coord(strategy, model);
    if (mode == "nan")
      coord.create_per_worker_dataset([] { return make_dataset(5); });
    else
      coord.create_per_worker_dataset([] { return make_dataset(); });
    // A function of the user's, defined on every task: the loss of its batch with the variables
    // the ps tasks hold now, nothing pushed.
    const std::size_t batch_loss = coord.define([](auto& ctx) {
      ctx.pull();
      return ctx.model().compute_loss_and_gradients(ctx.batch().first, ctx.batch().second);
    });

    if (!strategy.is_chief()) {
      const bool ps_task = strategy.task_type() == ps::role::ps;
      if ((mode == "ps_lost" || (mode == "ps_restarted" && !restarted)) && ps_task &&
          strategy.task_index() == 1)
        std::thread([mode] {
          std::this_thread::sleep_for(std::chrono::milliseconds(mode == "ps_lost" ? 2000 : 1000));
          ::raise(SIGKILL);
        }).detach();
      ps::worker_callbacks callbacks;
      if (mode == "failures" || mode == "ps_lost" || mode == "ps_restarted" || mode == "stalled" ||
          mode == "chief_lost")
        callbacks.on_train_batch_begin = [](std::uint64_t) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        };
      if (mode == "failures" && !ps_task && strategy.task_index() == 1 && !restarted) {
        auto count = std::make_shared<int>(0);
        callbacks.on_train_batch_end = [count](std::uint64_t) {
          if (++*count == 3) ::raise(SIGKILL);
        };
      }
      if (mode == "stalled" && !ps_task && strategy.task_index() == 1) {
        auto count = std::make_shared<int>(0);
        callbacks.on_train_batch_begin = [count](std::uint64_t) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          if (++*count == 3) ::raise(SIGSTOP);
        };
      }
      coord.set_worker_callbacks(callbacks);
      return coord.serve();
    }

    std::printf("%s", coord.explain().c_str());
    if (mode == "equal") {
      const history h = coord.fit(
          // No steps_per_epoch: the dataset's 32 batches.
          {.epochs = 3, .verbose = 1, .validation_data = make_dataset()});
      check(h.history.at("loss").back() < h.history.at("loss").front(),
            "the loss falls over 3 epochs");
      check(h.history.count("val_loss") && h.history.at("val_loss").size() == 3 &&
                h.history.at("val_loss").back() < h.history.at("val_loss").front(),
            "validation on the chief each epoch, its loss falling");
      check(h.history.at("staleness").back() == 0, "one worker: staleness 0");
      const double worst = against_one_device(model, initial, 3);
      std::printf("one worker against one device: worst relative weight difference %.2e\n", worst);
      check(worst <= 1e-5, "one worker, variables on 2 ps tasks in shards, equals one device");
      exactly_once(coord, 96);
      // The user's function on the next 4 batches (96..99: pass 3, positions 0..3), against the
      // chief's own loss of those batches with the trained variables.
      std::vector<ps::remote_value> losses;
      for (int i = 0; i < 4; ++i) losses.push_back(coord.schedule(batch_loss));
      coord.join();
      check(coord.done(), "join waits for every scheduled function");
      const dataset_t ds = make_dataset();
      ds.set_iterations(3);
      std::size_t k = 0;
      double worst_loss = 0;
      for (const auto& [x, y] : ds) {
        if (k == 4) break;
        const double expected = model.compute_loss_and_gradients(x, y);
        worst_loss = std::max(worst_loss, std::fabs(losses[k++].fetch() - expected));
      }
      check(worst_loss <= 1e-6,
            "a user's function scheduled on the workers returns the loss "
            "of its batch (worst difference " +
                std::to_string(worst_loss) + ")");
    } else if (mode == "user_optimizer") {
      const history h = coord.fit({.epochs = 2, .verbose = 0});
      check(h.history.at("loss").back() < h.history.at("loss").front(),
            "the loss falls over 2 epochs");
      const double worst = against_one_device(model, initial, 2, compiled);
      std::printf(
          "user's optimizer, one worker against one device: worst relative weight "
          "difference %.2e\n",
          worst);
      check(worst <= 1e-5, "a user's optimizer on 2 ps tasks equals one device");
      exactly_once(coord, 64);
    } else if (mode == "clipped") {
      coord.fit({.epochs = 2, .verbose = 0});
      const double worst = against_one_device(model, initial, 2, compiled);
      const double apart = against_one_device(model, initial, 2, "adam");  // unclipped, constant
      std::printf(
          "clipnorm and a schedule, one worker against one device: worst relative weight "
          "difference %.2e; "
          "from the unclipped run %.2e\n",
          worst, apart);
      check(worst <= 1e-5, "clipnorm and a schedule on 2 ps tasks in shards equal one device");
      check(apart > 1e-3, "the clipping acts");
      exactly_once(coord, 64);
    } else if (mode == "accumulated") {
      coord.fit({.epochs = 2, .verbose = 0});
      const double worst = against_one_device(model, initial, 2, compiled);
      const double apart = against_one_device(model, initial, 2, "adam");
      std::printf(
          "gradient_accumulation_steps, one worker against one device: worst relative weight "
          "difference %.2e; from the run without %.2e\n",
          worst, apart);
      check(worst <= 1e-5, "gradient accumulation on 2 ps tasks equals one device");
      check(apart > 1e-3, "the accumulation acts");
      exactly_once(coord, 64);
      for (const optimizer_spec& refused :
           {optimizer_spec(optimizers::adam{.use_ema = true}),
            optimizer_spec(optimizers::adam{.clipnorm = 1.0, .gradient_accumulation_steps = 2})}) {
        model_t other;
        other.compile({.optimizer = refused, .loss = "sparse_categorical_crossentropy"});
        std::string why;
        try {
          ps::cluster_coordinator<model_t, dataset_t> no(strategy, other);
        } catch (const value_error& e) {
          why = e.what();
        }
        check(why.find(refused.config().use_ema ? "the optimizer has use_ema"
                                                : "clips by norm (clipnorm or global_clipnorm) "
                                                  "and accumulates gradients") != std::string::npos,
              "the coordinator refuses, saying why: " + why);
      }
    } else if (mode == "failures") {
      const history h = coord.fit({.epochs = 3, .steps_per_epoch = 32, .verbose = 0});
      std::printf("losses per epoch: %.4f %.4f %.4f, mean staleness %.2f\n",
                  h.history.at("loss")[0], h.history.at("loss")[1], h.history.at("loss")[2],
                  h.history.at("staleness")[2]);
      const ps::coordinator_stats& s = coord.stats();
      check(s.workers_lost == 1 && s.workers_rejoined == 1 && s.batches_reassigned == 1,
            "one worker lost, rejoined, its batch reassigned (lost " +
                std::to_string(s.workers_lost) + ", rejoined " +
                std::to_string(s.workers_rejoined) + ", reassigned " +
                std::to_string(s.batches_reassigned) + ")");
      for (std::size_t p = 0; p < s.ps_refused.size(); ++p)
        check(s.ps_refused[p] == 1, "ps " + std::to_string(p) +
                                        " refused the lost worker's batch pushed again (" +
                                        std::to_string(s.ps_refused[p]) + ")");
      exactly_once(coord, 96);
    } else if (mode == "resume") {
      const std::filesystem::path dir = argc > 2 ? argv[2] : "ps_backup";
      const bool second = std::filesystem::exists(dir / "position.json");
      (void)coord.fit({.epochs = 3,
                       .steps_per_epoch = 32,
                       .verbose = 0,
                       .backup_dir = dir,
                       .on_epoch_end = [&](std::size_t e, const logs&) {
                         if (!second && e == 1) ::raise(SIGKILL);
                       }});
      check(second, "the second run found the first's backup");
      const double worst = against_one_device(model, initial, 3);
      std::printf(
          "resumed after 2 epochs against one device's 3: worst relative weight "
          "difference %.2e\n",
          worst);
      check(worst <= 1e-5, "resumed from the backup, training ends as one device's");
      const ps::coordinator_stats& s = coord.stats();
      std::vector<std::uint64_t> trained = s.trained;
      std::sort(trained.begin(), trained.end());
      bool last = trained.size() == 32;
      for (std::size_t i = 0; last && i < 32; ++i) last = trained[i] == 64 + i;
      check(last, "the second run trained batches 64..95, each once");
      check(!std::filesystem::exists(dir / "position.json") &&
                !std::filesystem::exists(dir / "checkpoint.weights.h5"),
            "the backup's files are removed when fit completes");
    } else if (mode == "ps_restarted") {
      const std::filesystem::path dir = argc > 2 ? argv[2] : "ps_restart_backup";
      std::filesystem::remove_all(dir);
      (void)coord.fit({.epochs = 4, .steps_per_epoch = 32, .verbose = 0, .backup_dir = dir});
      const double worst = against_one_device(model, initial, 4);
      std::printf(
          "a ps restarted mid-training against one device's 4 epochs: worst relative "
          "weight difference %.2e\n",
          worst);
      check(coord.stats().ps_restarts == 1, "one ps lost and given the backup's state");
      check(worst <= 1e-5, "after a ps restarted from the backup, training ends as one device's");
      exactly_once(coord, 128, false);
      std::filesystem::remove_all(dir);
    } else if (mode == "stalled") {
      (void)coord.fit({.epochs = 2, .steps_per_epoch = 32, .verbose = 0});
      const ps::coordinator_stats& s = coord.stats();
      check(s.workers_lost == 1 && s.batches_reassigned == 1,
            "the stopped worker found lost, its batch reassigned (lost " +
                std::to_string(s.workers_lost) + ", reassigned " +
                std::to_string(s.batches_reassigned) + ")");
      exactly_once(coord, 64);
    } else if (mode == "chief_lost") {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        ::raise(SIGKILL);
      }).detach();
      (void)coord.fit({.epochs = 1000, .steps_per_epoch = 32, .verbose = 0});
    } else if (mode == "nan") {
      // Batch 5 of the first epoch holds a NaN: the worker pushes nothing for it, and the chief
      // ends fit as Keras's TerminateOnNaN does, after that epoch.
      const history h = coord.fit({.epochs = 3, .steps_per_epoch = 32, .verbose = 0});
      check(h.history.at("loss").size() == 1 && std::isnan(h.history.at("loss")[0]),
            "fit ends after the epoch whose batch gave a NaN loss (" +
                std::to_string(h.history.at("loss").size()) + " epochs)");
      bool finite = true;
      for (const auto& w : model.get_weights())
        for (const float v : w.values) finite = finite && std::isfinite(v);
      check(finite, "the ps tasks' variables stay finite: the NaN batch was not pushed");
      const ps::coordinator_stats& s = coord.stats();
      check(s.ps_applied[0] >= 5 && s.ps_applied[0] <= 7,
            "the ps applied the 5 batches before it and at most those in flight (" +
                std::to_string(s.ps_applied[0]) + ")");
    } else if (mode == "other_model") {
      // Worker 1 was built with another model: refused when it joins; worker 0 trains alone.
      // Worker 1 may start after worker 0 has trained every batch: the chief keeps answering
      // until it has asked to join and been refused (or 60 s pass).
      (void)coord.fit({.epochs = 1, .steps_per_epoch = 32, .verbose = 0});
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (coord.stats().workers_refused == 0 && std::chrono::steady_clock::now() < until) {
        (void)coord.done();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      check(coord.stats().workers_refused == 1, "the chief refused worker 1 when it joined");
      exactly_once(coord, 32);
    } else if (mode == "ps_lost") {
      (void)coord.fit({.epochs = 1000, .steps_per_epoch = 32, .verbose = 0});
      check(false, "the job ends when a ps is lost");
    }
    coord.shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_train_test: %s\n", e.what());
    return 1;
  }
  std::printf("ps_train_test %s: %d failed\n", mode.c_str(), failures);
  return failures == 0 ? 0 : 1;
}
