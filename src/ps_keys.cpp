// tessel-ps-keys FILE: makes a parameter-server cluster's CURVE keys (ps/security.hpp) and writes
// them to FILE, a new file readable by its owner only. Give every task of the cluster that file
// (TESSEL_PS_KEYS_FILE=FILE) or its text (TESSEL_PS_KEYS), as a cluster manager hands out a secret.
#include <cstdio>
#include <exception>
#include <tessel/ps/security.hpp>

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: tessel-ps-keys FILE\n"
                 "  writes a new parameter-server cluster's keys to FILE (never over a file that "
                 "exists); give every task TESSEL_PS_KEYS_FILE=FILE\n");
    return 2;
  }
  try {
    (void)tessel::ps::write_cluster_keys(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessel-ps-keys: %s\n", e.what());
    return 1;
  }
  std::printf("tessel-ps-keys: wrote the cluster's keys to %s (mode 0600); give every task %s=%s\n",
              argv[1], tessel::ps::keys_file_variable, argv[1]);
  return 0;
}
