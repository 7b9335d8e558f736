// Parameter servers (tessel/ps.hpp): seeds/001's MLP (784-256-256-10, Adam, batch 32) trained
// asynchronously, every task this program, started by scripts/ps_cluster.sh:
//
//   scripts/ps_cluster.sh --workers 1 --ps 1 build/benchmarks/ps_bench
//   scripts/ps_cluster.sh --workers 2 --ps 2 build/benchmarks/ps_bench
//
// The chief prints, side by side in one run:
//   - one device: train_on_batch on the chief, ms per step (the compute a worker does, with the
//     optimizer's update that the ps tasks do instead);
//   - the cluster: fit's wall time per step over 5 rounds of 200 steps (the best round), and the
//     steps per second over all workers, with the mean staleness;
//   - the staleness of 400 steps, as a distribution;
//   - raw ZeroMQ: a round trip over TCP on 127.0.0.1 between two sockets of this process that
//     carries what one step moves (the variables one way, the gradients the other, 1.07 MB
//     each), against the step's time beyond its compute; open and with CURVE.
// Run with the cluster's keys (ps_cluster.sh --new-keys build/tessel-ps-keys) to time a keyed
// cluster; benchmarks/compare_ps_security.sh alternates the two.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tessel/ps.hpp>
#include <tessel/tessel.hpp>
#include <thread>
#include <vector>

namespace {
using namespace tessel;
using namespace tessel::layers;
using model_t =
    sequential<one_device, input<784>, dense<256, {.activation = "relu"}>,
               dense<256, {.activation = "relu"}>, dense<10, {.activation = "softmax"}>>;
using dataset_t = dataset<float, std::int32_t>;
using clock_type = std::chrono::steady_clock;

dataset_t make_dataset() {
  array<float> x({6400, 784});
  array<std::int32_t> y({6400});
  std::uint32_t s = 12345;
  for (float& v : x.values) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 16777216.0f;
  }
  for (std::size_t i = 0; i < 6400; ++i) y.values[i] = static_cast<std::int32_t>(i % 10);
  return from_tensor_slices(std::move(x), std::move(y)).batch(32);
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// A DEALER -> ROUTER round trip on 127.0.0.1 carrying `bytes` each way, best of 200, in ms;
// with `security`'s keys, over CURVE with the ZAP handler, as the cluster's sockets.
double zmq_round_trip_ms(std::size_t bytes, const ps::transport_security& security = {}) {
  zmq::context_t ctx(1);
  const auto zap = security.handler(ctx);
  zmq::socket_t server(ctx, zmq::socket_type::router), client(ctx, zmq::socket_type::dealer);
  server.set(zmq::sockopt::linger, 0);
  client.set(zmq::sockopt::linger, 0);
  security.serve(server);
  security.ask(client);
  server.bind("tcp://127.0.0.1:*");
  client.connect(server.get(zmq::sockopt::last_endpoint));
  std::thread echo([&] {
    for (int i = 0; i < 220; ++i) {
      zmq::message_t id, body;
      (void)server.recv(id);
      (void)server.recv(body);
      std::vector<float> reply(bytes / 4, 1.0f);
      server.send(id, zmq::send_flags::sndmore);
      server.send(zmq::const_buffer(reply.data(), bytes), zmq::send_flags::none);
    }
  });
  std::vector<float> out(bytes / 4, 2.0f);
  double best = 1e9;
  for (int i = 0; i < 220; ++i) {
    const auto t = clock_type::now();
    client.send(zmq::const_buffer(out.data(), bytes), zmq::send_flags::none);
    zmq::message_t in;
    (void)client.recv(in);
    if (i >= 20) best = std::min(best, seconds_since(t) * 1e3);
  }
  echo.join();
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    ps::parameter_server_strategy strategy(
        ps::cluster_from_environment(),
        {.variable_partitioner = ps::min_size_partitioner{.max_shards = 4}});
    model_t model;
    model.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    ps::cluster_coordinator<model_t, dataset_t> coord(strategy, model);
    coord.create_per_worker_dataset(make_dataset);
    if (!strategy.is_chief()) return coord.serve();

    const dataset_t ds = make_dataset();
    // One device, on the chief: 3 rounds of 200 steps, the best.
    model_t alone;
    alone.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    double one_device = 1e9;
    for (int round = 0; round < 3; ++round) {
      const auto t = clock_type::now();
      for (const auto& [x, y] : ds) alone.train_on_batch(x, y);
      one_device = std::min(one_device, seconds_since(t) * 1e3 / 200);
    }
    // The cluster: 5 epochs of 200 steps, the best.
    double cluster = 1e9, staleness = 0;
    for (int round = 0; round < 5; ++round) {
      const auto t = clock_type::now();
      const history h = coord.fit({.epochs = 1, .steps_per_epoch = 200, .verbose = 0});
      const double ms = seconds_since(t) * 1e3 / 200;
      if (ms < cluster) {
        cluster = ms;
        staleness = h.history.at("staleness").back();
      }
    }
    // The staleness of each of 400 steps scheduled one by one: its distribution.
    std::vector<ps::remote_value> steps;
    for (int i = 0; i < 400; ++i) steps.push_back(coord.schedule());
    coord.join();
    std::vector<std::size_t> histogram;
    for (const auto& v : steps) {
      const std::size_t s = v.staleness();
      if (histogram.size() <= s) histogram.resize(s + 1);
      ++histogram[s];
    }
    std::size_t bytes = 0;
    for (const auto& w : model.get_weights()) bytes += w.values.size() * 4;
    const double raw = zmq_round_trip_ms(bytes);
    const double raw_curve = zmq_round_trip_ms(bytes, {ps::make_cluster_keys()});
    const int workers = strategy.num_workers();
    std::printf("ps_bench: %d workers, %d ps, %zu bytes of variables in %zu shards\n", workers,
                strategy.num_ps(), bytes, coord.variable_placement().shards.size());
    std::printf("  one device (train_on_batch):      %.3f ms/step\n", one_device);
    std::printf(
        "  cluster (fit, all workers):       %.3f ms/step  (%.0f steps/s, %.2fx one "
        "device; mean staleness %.2f)\n",
        cluster, 1e3 / cluster, one_device / cluster, staleness);
    std::printf("  a step's time beyond compute, per worker: %.3f ms\n",
                cluster * workers - one_device);
    std::printf("  raw ZeroMQ round trip of %zu B each way: %.3f ms open, %.3f ms with CURVE\n",
                bytes, raw, raw_curve);
    std::printf("  this cluster's transport: %s\n",
                strategy.security().open() ? "open" : "CURVE (the cluster's keys)");
    std::printf("  staleness of 400 steps:");
    for (std::size_t s = 0; s < histogram.size(); ++s)
      if (histogram[s]) std::printf(" %zu: %zu", s, histogram[s]);
    std::printf("\n");
    std::printf("RESULT ps workers=%d samples_per_s=%.0f keyed=%d raw_ms=%.3f raw_curve_ms=%.3f\n",
                workers, 32e3 / cluster, strategy.security().open() ? 0 : 1, raw, raw_curve);
    coord.shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
