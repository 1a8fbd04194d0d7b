/* probecost PROGRAM OFFSET[:ret] ... -- ARGS...: run PROGRAM ARGS with uprobes at the given file
 * offsets of PROGRAM (":ret" makes one a return probe) and print the program's wall time.
 * Each probe samples the registers hpcrun-rs's allocator probes sample (no stack), into a
 * ring of 2 MiB per CPU drained as it fills, so the difference to a run without probes is the
 * kernel's cost of the probe hits. As root (uprobes need CAP_SYS_ADMIN).
 *
 *   gcc -O2 -static tests/fixtures/alloc_aligned.c -o aligned
 *   probecost ./aligned 0x16ec0 -- /dev/null 200000        # free probed at its first insn
 *   probecost ./aligned 0x16ec3 -- /dev/null 200000        # free probed on its `je`
 *
 * Used for the per-hit figures in profiler/src/uprobes/placement.rs. */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING_PAGES 512

static long perf_open(struct perf_event_attr *a, pid_t pid, int cpu, int group) {
  return syscall(SYS_perf_event_open, a, pid, cpu, group, PERF_FLAG_FD_CLOEXEC);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int sep = 1;
  while (sep < argc && strcmp(argv[sep], "--") != 0)
    sep++;
  if (argc < 3 || sep == argc) {
    fprintf(stderr, "usage: probecost PROGRAM OFFSET[:ret]... -- ARGS...\n");
    return 2;
  }
  FILE *t = fopen("/sys/bus/event_source/devices/uprobe/type", "r");
  int type = 0;
  if (!t || fscanf(t, "%d", &type) != 1)
    return 2;
  int go[2];
  if (pipe(go) != 0)
    return 2;
  pid_t child = fork();
  if (child == 0) {
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) != 1)
      _exit(126);
    argv[sep] = argv[1];
    execv(argv[1], argv + sep);
    _exit(127);
  }
  close(go[0]);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu > 64)
    ncpu = 64;
  int ring_fd[64];
  struct perf_event_mmap_page *ring[64];
  for (int cpu = 0; cpu < ncpu; cpu++) {
    ring_fd[cpu] = -1;
    for (int i = 2; i < sep; i++) {
      struct perf_event_attr a = {0};
      a.size = sizeof a;
      a.type = type;
      a.config = strstr(argv[i], ":ret") ? 1 : 0;
      a.config1 = (uint64_t)(uintptr_t)argv[1];
      a.config2 = strtoull(argv[i], NULL, 0);
      a.sample_period = 1;
      a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                      PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_REGS_USER;
      a.sample_regs_user = 0x1f9; /* AX DX SI DI BP SP IP */
      a.inherit = 1;
      a.disabled = 1;
      a.enable_on_exec = 1;
      a.watermark = 1;
      a.wakeup_watermark = RING_PAGES * 4096 / 2;
      int fd = perf_open(&a, child, cpu, -1);
      if (fd < 0) {
        perror("perf_event_open");
        kill(child, SIGKILL);
        return 1;
      }
      if (ring_fd[cpu] < 0) {
        /* The first event of each CPU owns its ring; the others write into it. */
        ring_fd[cpu] = fd;
        ring[cpu] = mmap(NULL, (RING_PAGES + 1) * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (ring[cpu] == MAP_FAILED)
          return 1;
      } else if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ring_fd[cpu]) != 0) {
        perror("PERF_EVENT_IOC_SET_OUTPUT");
        return 1;
      }
    }
  }
  double start = now();
  if (write(go[1], "x", 1) != 1)
    return 1;
  close(go[1]);
  uint64_t samples = 0, lost = 0;
  int status = 0, done = 0;
  while (!done) {
    struct pollfd p[64];
    for (int cpu = 0; cpu < ncpu; cpu++)
      p[cpu] = (struct pollfd){.fd = ring_fd[cpu], .events = POLLIN};
    poll(p, ncpu, 10);
    done = waitpid(child, &status, WNOHANG) == child; /* then drain once more */
    for (int cpu = 0; cpu < ncpu; cpu++) {
      struct perf_event_mmap_page *meta = ring[cpu];
      uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
      uint64_t tail = meta->data_tail;
      char *data = (char *)meta + 4096;
      while (tail < head) {
        struct perf_event_header *h = (void *)(data + tail % (RING_PAGES * 4096));
        if (h->type == PERF_RECORD_SAMPLE)
          samples++;
        if (h->type == PERF_RECORD_LOST)
          lost += ((uint64_t *)h)[2];
        tail += h->size;
      }
      __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
    }
  }
  double wall = now() - start;
  printf("wall %.3f s  probe hits %llu  lost %llu\n", wall, (unsigned long long)samples,
         (unsigned long long)lost);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
