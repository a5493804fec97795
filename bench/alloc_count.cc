// A heap-allocation counter to load into a process under test with LD_PRELOAD
// (bench/gateway-bench.sh loads it into `idem gateway`):
//
//   LD_PRELOAD=build/release/bench/libidem_alloc_count.so IDEM_ALLOC_COUNT_FILE=/tmp/n idem ...
//   kill -USR2 PID     # writes the count so far to IDEM_ALLOC_COUNT_FILE
//
// It counts every call of malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign,
// valloc and pvalloc, atomically from any thread, and passes each on to glibc. operator new
// (every form) reaches malloc or aligned_alloc in libstdc++, so it is counted once, there. The
// count is written on SIGUSR2 and at exit, as one line "allocations N", to the file named by
// IDEM_ALLOC_COUNT_FILE (written to a temporary name, then renamed over it, so a reader never
// sees half a line), or to standard error when the variable is unset. Not part of idem.
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}

namespace {

std::atomic<uint64_t> allocations{0};
char target[4096];       // IDEM_ALLOC_COUNT_FILE, read once at load
char target_tmp[4112];   // target + ".tmp"

void Count() { allocations.fetch_add(1, std::memory_order_relaxed); }

// Async-signal-safe: no allocation, no stdio.
void Dump() {
  char line[64] = "allocations ";
  char digits[24];
  int n = 0;
  uint64_t v = allocations.load(std::memory_order_relaxed);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  size_t len = strlen(line);
  while (n > 0) line[len++] = digits[--n];
  line[len++] = '\n';
  if (target[0] == '\0') {
    (void)!write(2, line, len);
    return;
  }
  const int fd = open(target_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!write(fd, line, len);
  close(fd);
  rename(target_tmp, target);
}

void OnSignal(int) {
  const int saved = errno;
  Dump();
  errno = saved;
}

__attribute__((constructor)) void Load() {
  const char* file = getenv("IDEM_ALLOC_COUNT_FILE");
  if (file != nullptr && strlen(file) + 5 < sizeof(target)) {
    strcpy(target, file);
    strcpy(target_tmp, file);
    strcat(target_tmp, ".tmp");
  }
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR2, &action, nullptr);
}

__attribute__((destructor)) void Unload() { Dump(); }

}  // namespace

extern "C" {

void* malloc(size_t size) {
  Count();
  return __libc_malloc(size);
}

void* calloc(size_t n, size_t size) {
  Count();
  return __libc_calloc(n, size);
}

void* realloc(void* p, size_t size) {
  Count();
  return __libc_realloc(p, size);
}

void* memalign(size_t alignment, size_t size) {
  Count();
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) {
  Count();
  return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  Count();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr && size != 0) return ENOMEM;
  *out = p;
  return 0;
}

void* valloc(size_t size) {
  Count();
  return __libc_memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size);
}

void* pvalloc(size_t size) {
  Count();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return __libc_memalign(page, (size + page - 1) / page * page);
}

}  // extern "C"
