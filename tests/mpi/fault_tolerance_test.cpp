// Exact resume after a crash (backup_and_restore, trainer/checkpoint_callbacks.hpp): the program
// fits a small classifier (dropout, Adam, shuffled batches, accuracy) for 3 epochs of 6 batches
// with a backup every 4 batches (written in the background with --background 1), and writes its
// final weights and its last epoch's logs to a file. Given --kill-at K, process --kill-rank (default the last) sends itself SIGKILL after
// batch K (counted over the whole run), mid-epoch or not; run again with the same backup
// directory, fit restores the newest backup and goes on from the batch after it.
// fault_tolerance.cmake compares the file with an uninterrupted run's, bit for bit.
//
//   fault_tolerance_test <backup_dir> <out_file> [--kill-at K] [--kill-rank R] [--background 1]
//   fault_tolerance_test --flip <file>       flips the bits of the file's 9th byte
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <tessel/tessel.hpp>

#include "compare_models.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using model_t = sequential<data_parallel<>, input<12>, dense<16, {.activation = "relu"}>,
                           dropout<0.3>, dense<4, {.activation = "softmax"}>>;
}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--flip") == 0) {
    std::fstream f(argv[2], std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(8);
    f.get(c);
    f.seekp(8);
    f.put(static_cast<char>(~c));
    return f ? 0 : 1;
  }
  initialize guard(argc, argv);
  try {
    if (argc < 3) throw value_error("usage: fault_tolerance_test <backup_dir> <out_file> [...]");
    const std::string backup = argv[1], out = argv[2];
    long kill_at = -1;
    int kill_rank = num_processes() - 1;
    bool background = false;
    for (int i = 3; i + 1 < argc; ++i) {
      if (std::strcmp(argv[i], "--kill-at") == 0) kill_at = std::atol(argv[++i]);
      else if (std::strcmp(argv[i], "--kill-rank") == 0) kill_rank = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--background") == 0) background = std::atoi(argv[++i]) != 0;
    }
    const testing::data_set d = testing::make_data(96, 12, 4);
    model_t model;
    model.compile({.optimizer = "adam", .loss = "categorical_crossentropy",
                   .metrics = {"accuracy"}});
    callbacks::backup_and_restore backups(
        {.backup_dir = backup, .save_freq = 4, .delete_checkpoint = false,
         .double_checkpoint = true, .save_on_background = background});
    long batches = 0;
    callbacks::lambda_callback killer({.on_batch_end = [&](std::size_t, const logs&) {
      if (++batches == kill_at && process_id() == kill_rank) {
        std::printf("process %d: sending itself SIGKILL after batch %ld\n", process_id(), batches);
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
    }});
    const history h = model.fit(d.x, d.y, {.batch_size = 16, .epochs = 3, .verbose = 0,
                                           .callbacks = {backups, killer}});
    const training_position& p = backups.restored_position();
    if (process_id() == 0) {
      std::printf("went on from epoch %zu, batch %zu; %zu epochs run\n", p.epoch, p.step,
                  h.epoch.size());
      std::ofstream f(out, std::ios::binary | std::ios::trunc);
      for (const auto& w : model.get_weights())
        f.write(reinterpret_cast<const char*>(w.values.data()),
                static_cast<std::streamsize>(w.values.size() * sizeof(float)));
      for (const auto& [key, values] : h.history)
        f.write(reinterpret_cast<const char*>(&values.back()), sizeof(double));
      if (!f) throw runtime_error("cannot write '" + out + "'");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (process %d): %s\n", process_id(), e.what());
    return 1;
  }
  return 0;
}
