/* koord-stress: the CPU and memory load of the node tests, with the command line of stress(1)
 * (the reference's stress-demo runs `stress --vm 2 --vm-bytes 11G -c 2 --vm-hang 2`), so the
 * reference's pod shapes run unchanged apart from the sizes. Built static into the workload
 * image (no image can be pulled on the test machines).
 *
 *   koord-stress [-c N] [-m N] [--vm-bytes B] [--vm-hang S] [-t S]
 *
 *   -c, --cpu N       N workers spinning on sqrt()
 *   -m, --vm N        N workers: malloc B bytes, write every page, hold S seconds, free, repeat
 *   --vm-bytes B      bytes per vm worker, suffix K/M/G (default 256M, as stress)
 *   --vm-hang S       seconds to hold the memory before freeing it (default 0: no hold)
 *   -t, --timeout S   exit 0 after S seconds (default: run until SIGTERM)
 *
 * A worker killed by a signal (the OOM killer at a memory limit) makes the whole program exit 1
 * with "worker <pid> got signal <n>", as stress does. SIGTERM/SIGINT stop every worker, exit 0.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64

static pid_t workers[MAX_WORKERS];
static int nworkers;
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void on_alarm(int sig) {
    (void)sig;
    stop_requested = 2;
}

static long long parse_bytes(const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || v <= 0) return -1;
    switch (*end) {
    case '\0': case 'B': case 'b': return v;
    case 'K': case 'k': return v << 10;
    case 'M': case 'm': return v << 20;
    case 'G': case 'g': return v << 30;
    default: return -1;
    }
}

static long parse_count(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return (errno || *end || v < 0) ? -1 : v;
}

static void cpu_worker(void) {
    volatile double x = 0;
    for (unsigned long i = 1;; i++) x += sqrt((double)(i % 100000));
}

static void vm_worker(long long bytes, long hang) {
    long page = sysconf(_SC_PAGESIZE);
    for (;;) {
        char *p = malloc((size_t)bytes);
        if (!p) {
            fprintf(stderr, "koord-stress: malloc(%lld) failed\n", bytes);
            _exit(1);
        }
        for (long long off = 0; off < bytes; off += page) p[off] = 'Z';
        if (hang > 0) sleep((unsigned)hang);
        free(p);
    }
}

static int spawn(void (*fn)(long long, long), long long bytes, long hang, int cpu) {
    if (nworkers == MAX_WORKERS) {
        fprintf(stderr, "koord-stress: at most %d workers\n", MAX_WORKERS);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        if (cpu) cpu_worker();
        fn(bytes, hang);
        _exit(0);
    }
    workers[nworkers++] = pid;
    return 0;
}

static void stop_all(void) {
    for (int i = 0; i < nworkers; i++)
        if (workers[i] > 0) kill(workers[i], SIGKILL);
    while (wait(NULL) > 0) {
    }
}

static void usage(void) {
    fprintf(stderr, "usage: koord-stress [-c N] [-m N] [--vm-bytes B] [--vm-hang S] [-t S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    long cpus = 0, vms = 0, hang = 0, timeout = 0;
    long long bytes = 256LL << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "-c") || !strcmp(a, "--cpu")) cpus = parse_count(v);
        else if (!strcmp(a, "-m") || !strcmp(a, "--vm")) vms = parse_count(v);
        else if (!strcmp(a, "--vm-bytes")) bytes = parse_bytes(v);
        else if (!strcmp(a, "--vm-hang")) hang = parse_count(v);
        else if (!strcmp(a, "-t") || !strcmp(a, "--timeout")) timeout = parse_count(v);
        else usage();
        if (cpus < 0 || vms < 0 || bytes < 0 || hang < 0 || timeout < 0) usage();
    }
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction alarm_sa = {.sa_handler = on_alarm};
    sigaction(SIGTERM, &stop, NULL);
    sigaction(SIGINT, &stop, NULL);
    sigaction(SIGALRM, &alarm_sa, NULL);
    printf("koord-stress: dispatching hogs: %ld cpu, %ld vm of %lld bytes, hang %ld s\n", cpus,
           vms, bytes, hang);
    fflush(stdout);
    for (long i = 0; i < cpus; i++)
        if (spawn(NULL, 0, 0, 1) < 0) goto fail;
    for (long i = 0; i < vms; i++)
        if (spawn(vm_worker, bytes, hang, 0) < 0) goto fail;
    if (timeout > 0) alarm((unsigned)timeout);
    while (!stop_requested) {
        int status;
        pid_t pid = wait(&status);
        if (pid < 0) {
            if (errno == EINTR) continue;
            if (errno == ECHILD) pause(); /* no workers: just wait for a signal */
            continue;
        }
        for (int i = 0; i < nworkers; i++)
            if (workers[i] == pid) workers[i] = 0;
        if (WIFSIGNALED(status)) {
            fprintf(stderr, "koord-stress: worker %d got signal %d\n", (int)pid, WTERMSIG(status));
            goto fail;
        }
        fprintf(stderr, "koord-stress: worker %d exited with %d\n", (int)pid, WEXITSTATUS(status));
        goto fail;
    }
    stop_all();
    printf("koord-stress: %s\n", stop_requested == 2 ? "timeout, done" : "stopped");
    return 0;
fail:
    stop_all();
    return 1;
}
