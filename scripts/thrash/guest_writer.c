/*
 * The thrasher's guest writer (scripts/thrash/host.py packs it, static, into the guest's
 * initramfs): WRITERS processes, each owning the blocks B of DEVICE with B % WRITERS equal to
 * its number, write generation-stamped 4 KiB blocks forever, in rounds of ROUND random blocks
 * (O_DIRECT, one at a time per process: several in flight on the disk, so that a request held
 * at a kill has later ones completed around it) each ended by fdatasync (a FLUSH the device
 * acknowledges), then read a sample back and check that every block holds its last flushed
 * generation or one written since.
 *
 * usage: thrash-writer DEVICE BLOCKS SEED
 * Block B of generation G holds (B, G) as two little-endian 64-bit words, repeated (the same
 * stamp as crates/vbmq-bench/examples/thrash_client.rs). Writer W prints `G GEN W` after each
 * flushed round, `GE GEN ERRNO W` for a failed write or flush, `GV BLOCK ...` for a lost write
 * (and exits 1, as does the whole program).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4096
#define ROUND 8
#define SAMPLE 8
#define WRITERS 4

static uint64_t rng_state;

static uint64_t next_random(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

/* 0 if BUF is a block BLOCK may hold, given its last flushed and last written generation. */
static int check(const uint64_t *buf, uint64_t block, uint64_t low, uint64_t high)
{
    int uniform = 1;
    for (int i = 2; i < BLOCK / 8; i += 2)
        if (buf[i] != buf[0] || buf[i + 1] != buf[1])
            uniform = 0;
    int here = uniform && buf[0] == block;
    if (here && buf[1] >= low && buf[1] <= high)
        return 0;
    if (low == 0 && !(here && buf[1] > high))
        return 0;
    if (!uniform && low < high)
        return 0;
    printf("GV %llu holds (%llu, %llu)%s where a generation in %llu..=%llu was due\n",
           (unsigned long long)block, (unsigned long long)buf[0], (unsigned long long)buf[1],
           uniform ? "" : " torn", (unsigned long long)low, (unsigned long long)high);
    fflush(stdout);
    return 1;
}

/* Writer `me`'s rounds on its blocks of DEVICE, forever; returns only on a lost write. */
static int writer(const char *device, uint64_t blocks, int me)
{
    int fd = open(device, O_RDWR | O_DIRECT);
    uint64_t *flushed = calloc(blocks, 8), *written = calloc(blocks, 8), *buf;
    if (fd < 0 || !flushed || !written || posix_memalign((void **)&buf, BLOCK, BLOCK)) {
        perror("thrash-writer");
        return 2;
    }
    for (uint64_t generation = 1;; generation++) {
        uint64_t picked[ROUND];
        int failed = 0;
        for (int i = 0; i < ROUND && !failed; i++) {
            uint64_t block = next_random() % (blocks / WRITERS) * WRITERS + me;
            picked[i] = block;
            for (int w = 0; w < BLOCK / 8; w += 2) {
                buf[w] = block;
                buf[w + 1] = generation;
            }
            written[block] = generation;
            if (pwrite(fd, buf, BLOCK, (off_t)(block * BLOCK)) != BLOCK)
                failed = errno ? errno : EIO;
        }
        if (!failed && fdatasync(fd) != 0)
            failed = errno;
        if (failed) {
            printf("GE %llu %d %d\n", (unsigned long long)generation, failed, me);
            fflush(stdout);
            usleep(200000);
            continue;
        }
        for (int i = 0; i < ROUND; i++)
            flushed[picked[i]] = generation;
        printf("G %llu %d\n", (unsigned long long)generation, me);
        fflush(stdout);
        for (int i = 0; i < SAMPLE; i++) {
            uint64_t block = next_random() % (blocks / WRITERS) * WRITERS + me;
            if (pread(fd, buf, BLOCK, (off_t)(block * BLOCK)) != BLOCK) {
                printf("GE %llu %d %d\n", (unsigned long long)generation, errno, me);
                fflush(stdout);
                break;
            }
            if (check(buf, block, flushed[block], written[block]))
                return 1;
        }
        usleep(20000);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: thrash-writer DEVICE BLOCKS SEED\n");
        return 2;
    }
    uint64_t blocks = strtoull(argv[2], NULL, 10), seed = strtoull(argv[3], NULL, 10);
    for (int me = 0; me < WRITERS; me++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            rng_state = (seed + (uint64_t)me * 0x9e3779b97f4a7c15ULL) | 1;
            return writer(argv[1], blocks, me);
        }
    }
    int status = 0;
    wait(&status); /* a writer returns only on a lost write or a failed start */
    printf("thrash-writer: a writer exited (status %d)\n", status);
    return 1;
}
