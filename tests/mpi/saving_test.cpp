// save_weights / load_weights across processes (saving/model_weights.hpp), on 2 processes:
// - data_parallel: process 0 alone writes the file (the other writes none, and no temporary file
//   is left); every process loads it, the weights and Adam's state come back bitwise on each, and
//   a step after the load equals the step without it;
// - a failure on one process is an error on every one (here: process 1 is given a missing file),
//   and no model changes;
// - model_parallel (d1's kernel and bias split over "model"): the file holds the gathered global
//   values (a one-device model loads it and holds get_weights' values), and it loads back onto
//   the split model with every process's blocks of the weights and slots bitwise as saved; a
//   write that fails on process 0 (which writes while the variables are gathered) is an error on
//   both processes.
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::error_of;
namespace fs = std::filesystem;

using mesh_t = device_mesh<axis<"batch">>;
template <class Dist>
using mlp = sequential<Dist, input<12>, dense<16, {.activation = "relu", .name = "d1"}>,
                       dense<8, {.activation = "tanh", .name = "d2"}>, dense<3, {.name = "d3"}>>;
using split_map = layout_map<device_mesh<axis<"data", 1>, axis<"model", 2>>,
                             rule<"d1/kernel", none, "model">, rule<"d1/bias", "model">>;

array<float> features(std::size_t rows, std::size_t salt) {
  array<float> x({rows, 12});
  for (std::size_t i = 0; i < x.size(); ++i)
    x.values[i] = static_cast<float>((i * 7 + salt * 13) % 23) / 11.0f - 1.0f;
  return x;
}
array<float> targets(std::size_t rows, std::size_t salt) {
  array<float> y({rows, 3});
  for (std::size_t i = 0; i < y.size(); ++i)
    y.values[i] = static_cast<float>((i * 5 + salt) % 9) / 4.0f - 1.0f;
  return y;
}
template <class Model>
void compile(Model& m) {
  m.compile(optimizers::adam{.learning_rate = 0.01}, losses::mean_squared_error{});
}
template <class Model>
void train(Model& m, std::size_t from, std::size_t steps) {
  for (std::size_t s = from; s < from + steps; ++s) m.train_on_batch(features(8, s), targets(8, s));
}
// This process's values of the model and its optimizer, bit for bit.
template <class Model>
std::vector<std::vector<float>> local_state(Model& m) {
  std::vector<std::vector<float>> out;
  for (const auto& w : m.get_weights()) out.push_back(w.values);
  for (const auto& v : m.get_optimizer().state()) {
    if (v.is_tensor())
      out.push_back(v.numpy());
    else if (v.dtype() == "int64")
      out.push_back({static_cast<float>(v.integer())});
    else
      out.push_back({static_cast<float>(v.real())});
  }
  return out;
}
bool same(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// A directory every process names alike: process 0's pid, broadcast.
fs::path shared_dir() {
  std::int64_t pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  const fs::path dir = fs::temp_directory_path() / ("tessel_mpi_saving_" + std::to_string(pid));
  if (process_id() == 0) fs::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

void data_parallel_saves_once_and_every_process_loads(const fs::path& dir) {
  const std::string path = (dir / "dp.weights.h5").string();
  mlp<data_parallel<mesh_t>> a;
  compile(a);
  train(a, 0, 3);
  const std::size_t before = saving::files_written();
  a.save_weights(path);
  const std::size_t wrote = saving::files_written() - before;
  check(wrote == (process_id() == 0 ? 1u : 0u), "process " + std::to_string(process_id()) +
                                                    " wrote " + std::to_string(wrote) +
                                                    " files; only process 0 writes");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  check(files == 1, "the directory holds the file alone (no temporary left): " +
                        std::to_string(files) + " files");

  mlp<data_parallel<mesh_t>> b;
  compile(b);
  b.load_weights(path);
  check(same(local_state(b), local_state(a)), "every process loads the weights and Adam's state");
  train(a, 3, 2);
  train(b, 3, 2);
  check(same(local_state(b), local_state(a)), "two steps after the load equal two without it");

  // Process 1 is given a file that does not exist: both processes throw, neither model changes.
  if (num_processes() < 2) return;
  const std::vector<std::vector<float>> kept = local_state(b);
  const std::string mine = process_id() == 0 ? path : (dir / "missing.weights.h5").string();
  const std::string e = error_of([&] { b.load_weights(mine); });
  check(e.find("load_weights failed on process 1 of " + std::to_string(num_processes())) !=
                std::string::npos &&
            e.find("missing.weights.h5") != std::string::npos &&
            e.find("does not exist") != std::string::npos,
        "every process names process 1 and its missing file: '" + e + "'");
  check(same(local_state(b), kept), "a failed load changes no model");
}

void model_parallel_saves_global_values(const fs::path& dir) {
  const std::string path = (dir / "mp.weights.h5").string();
  mlp<model_parallel<split_map, "data">> a;
  compile(a);
  train(a, 0, 3);
  a.save_weights(path);
  const std::vector<array<float>> global = a.get_weights();

  mlp<one_device> one;  // on each process alone
  one.load_weights(path);
  const std::vector<array<float>> loaded = one.get_weights();
  bool equal = loaded.size() == global.size();
  for (std::size_t i = 0; equal && i < global.size(); ++i)
    equal = loaded[i].shape == global[i].shape && loaded[i].values == global[i].values;
  check(equal, "the file holds the global values a one-device model loads");

  mlp<model_parallel<split_map, "data">> b;
  compile(b);
  b.load_weights(path);
  check(same(local_state(b), local_state(a)),
        "the split model loads back its blocks of the weights and Adam's slots");
  train(a, 3, 2);
  train(b, 3, 2);
  check(same(local_state(b), local_state(a)), "and trains on as the model that never stopped");

  // Process 0 writes on a thread of its own while the variables are gathered: its write fails
  // (no such directory), the gathers go on, and both processes throw, process 0 naming the file.
  const std::string bad = (dir / "no_such_dir" / "mp.weights.h5").string();
  const std::string e = error_of([&] { a.save_weights(bad); });
  check(e.find("save_weights failed on process 0 of " + std::to_string(num_processes()) + ": ") !=
                std::string::npos &&
            e.find("no_such_dir") != std::string::npos,
        "every process names process 0 and the file it could not write: '" + e + "'");
  check(!fs::exists(dir / "no_such_dir"), "a failed save leaves nothing");
}

// Processes that each load other (valid) values into a replicated model are refused, naming the
// variable and the processes, instead of training apart: each process's own .weights.h5 file,
// its own checkpoint, and a state tree that differs on one process. The same file everywhere
// loads (above), and so does a model split over "model" whose blocks differ by design.
void processes_that_load_different_values_are_refused(const fs::path& dir) {
  const std::string rank = std::to_string(process_id());
  mlp<one_device> own;  // on each process alone, trained on other batches
  compile(own);
  train(own, 10 * process_id(), 2);
  const std::string file = (dir / ("own_" + rank + ".weights.h5")).string();
  own.save_weights(file);
  const fs::path checkpoint = dir / ("own_" + rank);
  save_checkpoint(own, checkpoint);
  MPI_Barrier(MPI_COMM_WORLD);

  mlp<data_parallel<mesh_t>> b;
  compile(b);
  const auto names_both = [](const std::string& e, const std::string& where) {
    return e.find(where + ": the processes hold different values") != std::string::npos &&
           e.find("'d1/kernel': process 0 has one value and process 1 has another") !=
               std::string::npos &&
           e.find("Load the same file on every process") != std::string::npos;
  };
  std::string e = error_of([&] { b.load_weights(file); });
  check(names_both(e, "load_weights"), "each process's own weights file is refused: '" + e + "'");
  e = error_of([&] { load_checkpoint(b, checkpoint); });
  check(names_both(e, "load_checkpoint"), "each process's own checkpoint is refused: '" + e + "'");

  mlp<data_parallel<mesh_t>> c;
  compile(c);
  state_tree<backend::host> t = c.get_state_tree();
  if (process_id() == 1) {
    std::vector<float> v = t.trainable_variables[0].numpy();
    v[0] += 1.0f;
    backend::host::upload(v, t.trainable_variables[0].tensor().local());
  }
  e = error_of([&] { c.set_state_tree(t); });
  check(names_both(e, "set_state_tree"), "a state that differs on one process is refused: '" +
                                             e + "'");
}

}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  fs::path dir;
  try {
    dir = shared_dir();
    data_parallel_saves_once_and_every_process_loads(dir);
    if (num_processes() == 2) model_parallel_saves_global_values(dir);
    if (num_processes() == 2) processes_that_load_different_values_are_refused(dir);
  } catch (const std::exception& e) {
    check(false, std::string("threw: ") + e.what());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (process_id() == 0 && !dir.empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return tessel::testing::finish("saving_test");
}
