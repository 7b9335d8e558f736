// LD_PRELOAD shim for mpi.no_shared_memory_left: shm_unlink of the collective watchdog's segment
// (/tessel-watchdog-*) waits half a second first, so that a process that ends the job at once
// (MPI_Abort right after initialize) reliably does so while another process is about to remove
// the segment's name. Where only one process removed it, the segment stayed behind in /dev/shm;
// where every process removes it before going on, the one that aborts has removed it first.
#include <dlfcn.h>
#include <unistd.h>

#include <cstring>

extern "C" int shm_unlink(const char* name) {
  using fn = int (*)(const char*);
  static const fn real = reinterpret_cast<fn>(dlsym(RTLD_NEXT, "shm_unlink"));
  if (name != nullptr && std::strncmp(name, "/tessel-watchdog-", 17) == 0) usleep(500000);
  return real(name);
}
