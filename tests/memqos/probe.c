/* Workloads and probes of the memory-protection guest (tests/memqos/run-memqos-guest.sh).
 *
 *   probe read FILE             read FILE once with read(2), print "read_us=<us> mib=<n>"
 *                               (the LS access-latency probe: busybox has no clock finer than 1 s)
 *   probe resident FILE         how much of FILE is in the page cache, from mincore(2) on a
 *                               mapping that is never touched (so the probe adds no access):
 *                               "resident_pages=<n> total_pages=<n>"
 *   probe be ANON_MIB FILE PASSES
 *                               the BE workload: touch ANON_MIB MiB of anonymous memory (held to
 *                               the end), then read FILE PASSES times; prints "be pass <i> us=<us>"
 *                               per pass and "be done"
 *   probe hold ANON_MIB         touch ANON_MIB MiB, print "hold ready", sleep until killed
 *
 * Static (gcc -static), no dependencies.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1u << 20)

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

/* Reads the whole file; returns bytes read or -1. */
static long long read_all(const char *path) {
    static char buf[CHUNK];
    int fd = open(path, O_RDONLY);
    if (fd < 0) { perror(path); return -1; }
    long long total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) { perror("read"); close(fd); return -1; }
        if (n == 0) break;
        total += n;
    }
    close(fd);
    return total;
}

static int cmd_read(const char *path) {
    uint64_t t0 = now_us();
    long long n = read_all(path);
    if (n < 0) return 1;
    printf("read_us=%llu mib=%lld\n", (unsigned long long)(now_us() - t0), n >> 20);
    return 0;
}

static int cmd_resident(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { perror(path); return 1; }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) { perror("fstat"); return 1; }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { perror("mmap"); return 1; }
    size_t pages = (len + 4095) / 4096;
    unsigned char *vec = malloc(pages);
    if (!vec || mincore(map, len, vec) != 0) { perror("mincore"); return 1; }
    size_t resident = 0;
    for (size_t i = 0; i < pages; i++) resident += vec[i] & 1;
    printf("resident_pages=%zu total_pages=%zu\n", resident, pages);
    return 0;
}

/* Touches mib MiB of base pages (no THP: the guest counts and reclaims page by page). */
static unsigned char *touch_anon(size_t mib) {
    size_t len = mib << 20;
    if (len == 0) return NULL;
    unsigned char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) { perror("mmap"); exit(1); }
    madvise(mem, len, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < len; i += 4096) mem[i] = (unsigned char)(i >> 12) | 1;
    return mem;
}

static int cmd_be(size_t anon_mib, const char *path, int passes) {
    volatile unsigned char *mem = touch_anon(anon_mib);
    printf("be anon_mib=%zu\n", anon_mib);
    fflush(stdout);
    for (int i = 1; i <= passes; i++) {
        uint64_t t0 = now_us();
        if (read_all(path) < 0) return 1;
        printf("be pass %d us=%llu\n", i, (unsigned long long)(now_us() - t0));
        fflush(stdout);
    }
    if (mem) (void)mem[0];
    printf("be done\n");
    return 0;
}

static __attribute__((noreturn)) void cmd_hold(size_t anon_mib) {
    touch_anon(anon_mib);
    printf("hold ready\n");
    fflush(stdout);
    for (;;) pause();
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "read") == 0) return cmd_read(argv[2]);
    if (argc == 3 && strcmp(argv[1], "resident") == 0) return cmd_resident(argv[2]);
    if (argc == 5 && strcmp(argv[1], "be") == 0)
        return cmd_be(strtoul(argv[2], NULL, 10), argv[3], atoi(argv[4]));
    if (argc == 3 && strcmp(argv[1], "hold") == 0) cmd_hold(strtoul(argv[2], NULL, 10));
    fprintf(stderr, "usage: probe read FILE | resident FILE | be ANON_MIB FILE PASSES | hold ANON_MIB\n");
    return 2;
}
