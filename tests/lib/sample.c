/*
 * koord-sample: samples cgroup files at a fixed rate inside a test node, for the suites'
 * timing bounds (how long a protection file stayed below its value, how long a quota was
 * lifted). A static binary, so a guest runs it without an interpreter between two samples:
 * each tick opens, reads and closes every file, on an absolute clock (a late tick is not made
 * up, the next one keeps the rate).
 *
 *   koord-sample FILE[,FILE...] EVERY_SECONDS OUT UNTIL
 *
 * Writes one JSON line per tick to OUT: [seconds since start, value of each file], a value
 * being the file's first word as a number, "max" for max, or null when the file cannot be read
 * or holds anything else. UNTIL is a number of seconds, or a path whose existence stops it.
 * Exits 0 when stopped, 2 on bad arguments or an OUT it cannot write.
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
    for (;;) {
        double t = seconds_since(&t0);
        if (stop ? access(stop, F_OK) == 0 : t >= seconds)
            break;
        fprintf(out, "[%.3f", t);
        for (int i = 0; i < nfiles; i++) {
            fputc(',', out);
            write_value(out, files[i]);
        }
        fputs("]\n", out);
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
    }
    fclose(out);
    return 0;
}
