/* koord-stream: the workload of the async reclaim proof. Writes FILE (SIZE_MIB MiB) unless it
 * is there, then reads it PASSES times in 1 MiB read(2) calls, at most MIB_PER_S MiB a second
 * when given (a service streaming at its pace, not a benchmark at full speed), timing each
 * call, and prints one line: reads, p50/p99/p99.9/max microseconds per 1 MiB read, and MiB/s. A read that misses the
 * page cache allocates page cache charged to the container; at its memory limit that
 * allocation reclaims first (direct reclaim), which is what the per-read tail shows. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *v, long n, double p) {
    long i = (long)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: koord-stream FILE SIZE_MIB PASSES [MIB_PER_S]\n");
        return 2;
    }
    const char *path = argv[1];
    long mib = atol(argv[2]), passes = atol(argv[3]);
    double rate = argc == 5 ? atof(argv[4]) : 0;
    if (mib <= 0 || passes <= 0 || rate < 0) {
        fprintf(stderr, "koord-stream: SIZE_MIB and PASSES must be positive, MIB_PER_S >= 0\n");
        return 2;
    }
    static char buf[CHUNK];
    if (access(path, F_OK) != 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { perror(path); return 1; }
        for (long i = 0; i < CHUNK; i++) buf[i] = (char)(i * 131 + 7);
        for (long i = 0; i < mib; i++) {
            if (write(fd, buf, CHUNK) != CHUNK) { perror("write"); return 1; }
        }
        if (fsync(fd) != 0 || close(fd) != 0) { perror("fsync"); return 1; }
    }
    long n = mib * passes, k = 0;
    double *lat = malloc(sizeof(double) * (size_t)n);
    if (!lat) { perror("malloc"); return 1; }
    double start = now_us();
    for (long p = 0; p < passes; p++) {
        int fd = open(path, O_RDONLY);
        if (fd < 0) { perror(path); return 1; }
        for (;;) {
            double t0 = now_us();
            ssize_t got = read(fd, buf, CHUNK);
            double t1 = now_us();
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) { perror("read"); return 1; }
            if (got == 0) break;
            if (k < n) lat[k++] = t1 - t0;
            if (rate > 0) {
                /* The k-th MiB is due at start + k / rate: sleep until then. */
                double due = start + (double)k * 1e6 / rate, wait = due - now_us();
                if (wait > 0) usleep((useconds_t)wait);
            }
        }
        close(fd);
    }
    double secs = (now_us() - start) / 1e6;
    qsort(lat, (size_t)k, sizeof(double), cmp);
    printf("reads %ld p50_us %.0f p99_us %.0f p999_us %.0f max_us %.0f mib_s %.1f\n", k,
           pct(lat, k, 0.50), pct(lat, k, 0.99), pct(lat, k, 0.999), lat[k - 1],
           (double)k / (secs > 0 ? secs : 1));
    fflush(stdout);
    return 0;
}
