/*
 * koord-sample: samples cgroup files at a fixed rate inside a test node, for the suites'
 * timing bounds (how long a protection file stayed below its value, how long a quota was
 * lifted). A static binary, so a guest runs it without an interpreter between two samples:
 * each tick opens, reads and closes every file, on an absolute clock (a late tick is not made
 * up, the next one keeps the rate).
 *
 *   koord-sample FILE[,FILE...] EVERY_SECONDS OUT UNTIL
 *
 * Writes one JSON line per tick to OUT: [seconds since start, value of each file, evidence], a
 * value being the file's first word as a number, "max" for max, or null when the file cannot be
 * read or holds anything else. UNTIL is a number of seconds, or a path whose existence stops it.
 * Exits 0 when stopped, 2 on bad arguments or an OUT it cannot write.
 *
 * The evidence, {"late":S,"delay":S,"cpu":S} in seconds (null where the guest cannot say), is
 * what tells a gap between two lines that the sampler could not run from one it merely did not
 * (tests/lib/koordtest/coverage.py): how late this tick woke after the time it asked for, its
 * own run delay (runnable, not running) so far, and the CPU time the kernel accounted so far
 * per online CPU (all states, idle included: a guest that was not running accounts less than
 * the time that passed). All read at the tick's start, with its time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 64

static double seconds_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The file's first word as JSON: a number, "max", or null. */
static void write_value(FILE *out, const char *path) {
    char buf[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fputs("null", out);
        return;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) {
        fputs("null", out);
        return;
    }
    buf[n] = '\0';
    buf[strcspn(buf, " \t\n")] = '\0';
    if (strcmp(buf, "max") == 0) {
        fputs("\"max\"", out);
        return;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (buf[0] == '\0' || *end != '\0' || errno != 0) {
        fputs("null", out);
        return;
    }
    fprintf(out, "%lld", v);
}

/* The first line of a /proc file into buf; 0 on success. */
static int read_head(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* The evidence object into dst (written after the values, read before them: a tick that reads
 * its files slowly must not move its evidence away from its time). */
static void format_evidence(char *dst, size_t size, double late, long ticks_per_s, long cpus) {
    char buf[512], delay[32] = "null", cpu[32] = "null";
    unsigned long long run_ns, wait_ns, f[8];
    /* /proc/self/schedstat: time on the CPU, time waiting on a run queue, timeslices (ns). */
    if (read_head("/proc/self/schedstat", buf, sizeof buf) == 0 &&
        sscanf(buf, "%llu %llu", &run_ns, &wait_ns) == 2)
        snprintf(delay, sizeof delay, "%.3f", (double)wait_ns / 1e9);
    /* /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal (then guest and
     * guest_nice, already inside user and nice), in clock ticks. */
    if (ticks_per_s > 0 && cpus > 0 && read_head("/proc/stat", buf, sizeof buf) == 0 &&
        sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3],
               &f[4], &f[5], &f[6], &f[7]) == 8) {
        unsigned long long sum = 0;
        for (int i = 0; i < 8; i++)
            sum += f[i];
        snprintf(cpu, sizeof cpu, "%.3f", (double)sum / (double)ticks_per_s / (double)cpus);
    }
    snprintf(dst, size, "{\"late\":%.3f,\"delay\":%s,\"cpu\":%s}", late, delay, cpu);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s FILE[,FILE...] EVERY_SECONDS OUT UNTIL_SECONDS|STOP_PATH\n", argv[0]);
        return 2;
    }
    char *files[MAX_FILES];
    int nfiles = 0;
    for (char *save = NULL, *f = strtok_r(argv[1], ",", &save); f; f = strtok_r(NULL, ",", &save)) {
        if (nfiles == MAX_FILES) {
            fprintf(stderr, "at most %d files\n", MAX_FILES);
            return 2;
        }
        files[nfiles++] = f;
    }
    char *end = NULL;
    double every = strtod(argv[2], &end);
    if (nfiles == 0 || *end != '\0' || every < 0.001 || every > 60) {
        fprintf(stderr, "EVERY_SECONDS must be 0.001..60 and FILE not empty: %s %s\n", argv[2], argv[1]);
        return 2;
    }
    double seconds = strtod(argv[4], &end);
    const char *stop = NULL;
    if (*end != '\0' || argv[4][0] == '\0') {
        stop = argv[4];
        seconds = 0;
    }
    FILE *out = fopen(argv[3], "w");
    if (!out) {
        fprintf(stderr, "%s: %s\n", argv[3], strerror(errno));
        return 2;
    }
    struct timespec t0, next;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    next = t0;
    long step_ns = (long)(every * 1e9);
    long ticks_per_s = sysconf(_SC_CLK_TCK), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double late = 0;
    for (;;) {
        double t = seconds_since(&t0);
        if (stop ? access(stop, F_OK) == 0 : t >= seconds)
            break;
        char evidence[128];
        format_evidence(evidence, sizeof evidence, late, ticks_per_s, cpus);
        fprintf(out, "[%.3f", t);
        for (int i = 0; i < nfiles; i++) {
            fputc(',', out);
            write_value(out, files[i]);
        }
        fprintf(out, ",%s]\n", evidence);
        fflush(out);
        next.tv_nsec += step_ns;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
            next = now; /* late: keep the rate from here, do not burst to catch up */
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        late = (double)(now.tv_sec - next.tv_sec) + (double)(now.tv_nsec - next.tv_nsec) / 1e9;
    }
    fclose(out);
    return 0;
}
