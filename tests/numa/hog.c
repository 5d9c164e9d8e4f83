/* Memory hog for the two-node locality proof (tests/numa/run-two-node-guest.sh).
 *
 *   hog MIB CPU      pin to CPU, allocate and touch MIB MiB of anonymous memory (so the
 *                    default first-touch policy puts it on CPU's node), print
 *                    "hog ready pid=<pid>", then sleep; SIGUSR1 re-reads every page and
 *                    prints "hog verify ok" (or "hog verify FAILED") - the service keeps
 *                    running and its data is intact across migrations.
 *   hog time CMD...  run CMD, print "elapsed_ns=<ns>" on stderr, exit with its status.
 *
 * Static (gcc -static), no libnuma: only sched_setaffinity, mmap, madvise.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t verify_requested;
static unsigned char *mem;
static size_t len;

static void on_usr1(int sig) { (void)sig; verify_requested = 1; }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int run_timed(char **argv) {
    uint64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 127; }
    if (pid == 0) { execvp(argv[0], argv); perror("exec"); _exit(127); }
    int st = 0;
    waitpid(pid, &st, 0);
    fprintf(stderr, "elapsed_ns=%llu\n", (unsigned long long)(now_ns() - t0));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "time") == 0) return run_timed(argv + 2);
    if (argc != 3) { fprintf(stderr, "usage: hog MIB CPU | hog time CMD...\n"); return 2; }
    len = (size_t)strtoul(argv[1], NULL, 10) << 20;
    int cpu = atoi(argv[2]);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) { perror("sched_setaffinity"); return 1; }
    mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) { perror("mmap"); return 1; }
    /* Base pages, so numa_maps counts and migration work page by page. */
    madvise(mem, len, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < len; i += 4096) mem[i] = (unsigned char)(i >> 12);
    signal(SIGUSR1, on_usr1);
    printf("hog ready pid=%d mib=%zu\n", (int)getpid(), len >> 20);
    fflush(stdout);
    for (;;) {
        pause();
        if (verify_requested) {
            verify_requested = 0;
            size_t bad = 0;
            for (size_t i = 0; i < len; i += 4096)
                if (mem[i] != (unsigned char)(i >> 12)) bad++;
            printf(bad ? "hog verify FAILED bad=%zu\n" : "hog verify ok%.0zu\n", bad);
            fflush(stdout);
        }
    }
}
