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
 * stamp as crates/vbmq-bench/examples/thrash_client.rs). Writer W prints `GW GEN W B,B,...`
 * before a round's writes, `G GEN W` after each flushed round, `GE GEN ERRNO W` for a failed
 * write or flush, `GV BLOCK ...` for a lost write (and exits 1, as does the whole program).
 *
 * At start (first boot or after a reset) each writer reads its blocks back and resumes from
 * what they hold: a block's stamp is its last flushed generation, and the writer goes on from
 * the highest one read plus one, so that generations keep growing across reboots
 * (`GR MAX W` once done).
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
#define RESUME 64

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

/* Reads writer `me`'s blocks of the first `blocks` (RESUME blocks a read, so that the few
 * requests the device holds do not slow the scan) into its maps; returns the highest generation
 * read, or UINT64_MAX on a failed read. */
static uint64_t resume(int fd, uint64_t blocks, int me, uint64_t *flushed, uint64_t *written)
{
    uint64_t highest = 0, *chunk;
    if (posix_memalign((void **)&chunk, BLOCK, RESUME * BLOCK))
        return UINT64_MAX;
    for (uint64_t first = 0; first < blocks; first += RESUME) {
        uint64_t count = blocks - first < RESUME ? blocks - first : RESUME;
        if (pread(fd, chunk, count * BLOCK, (off_t)(first * BLOCK)) != (ssize_t)(count * BLOCK)) {
            perror("thrash-writer: resume");
            return UINT64_MAX;
        }
        for (uint64_t block = first; block < first + count; block++) {
            const uint64_t *buf = chunk + (block - first) * (BLOCK / 8);
            int uniform = 1;
            for (int i = 2; i < BLOCK / 8; i += 2)
                if (buf[i] != buf[0] || buf[i + 1] != buf[1])
                    uniform = 0;
            if (block % WRITERS != (uint64_t)me || !uniform || buf[0] != block)
                continue;
            flushed[block] = written[block] = buf[1];
            if (buf[1] > highest)
                highest = buf[1];
        }
    }
    free(chunk);
    return highest;
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
    uint64_t highest = resume(fd, blocks / WRITERS * WRITERS, me, flushed, written);
    if (highest == UINT64_MAX)
        return 2;
    printf("GR %llu %d\n", (unsigned long long)highest, me);
    fflush(stdout);
    for (uint64_t generation = highest + 1;; generation++) {
        uint64_t picked[ROUND];
        int failed = 0;
        for (int i = 0; i < ROUND; i++)
            picked[i] = next_random() % (blocks / WRITERS) * WRITERS + me;
        printf("GW %llu %d ", (unsigned long long)generation, me);
        for (int i = 0; i < ROUND; i++)
            printf(i ? ",%llu" : "%llu", (unsigned long long)picked[i]);
        printf("\n");
        fflush(stdout);
        for (int i = 0; i < ROUND && !failed; i++) {
            uint64_t block = picked[i];
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
