/* apptime FILE COMMAND...: run COMMAND and write its own wall and user+sys CPU seconds, and how
 * often it was preempted (involuntary context switches), to FILE.
 * Put inside a profiler's command line, it times the application alone (neither the profiler's
 * start-up nor its own work), and its shallow stack adds nothing to the profiler's unwinding
 * figures, which a Python wrapper's start-up would. Exits with COMMAND's status. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: apptime FILE COMMAND...\n");
    return 2;
  }
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    perror(argv[2]);
    _exit(127);
  }
  int status = 0;
  struct rusage usage;
  if (pid < 0 || wait4(pid, &status, 0, &usage) < 0)
    return 127;
  clock_gettime(CLOCK_MONOTONIC, &end);
  FILE *out = fopen(argv[1], "w");
  if (!out)
    return 127;
  fprintf(out, "%.6f %.6f %ld\n", (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9,
          seconds(usage.ru_utime) + seconds(usage.ru_stime), usage.ru_nivcsw);
  fclose(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
