/*
 * Guest side of the snapshot test: writes ROUNDS rounds of generation-stamped 4 KiB blocks
 * over the first BLOCKS blocks of DEVICE (O_DIRECT, one write at a time), each round ending
 * with fdatasync (a flush the device acknowledges).
 *
 * usage: stamp-writer DEVICE BLOCKS ROUNDS
 * Block B of round R holds (B, R) as two little-endian 64-bit words, repeated. A round writes
 * its blocks in the order of tests/common/stamps.rs (the first, the last, the second, the one
 * before the last...). Prints ROUND-START R before a round's first write and ROUND-DONE R once
 * its flush returned.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: stamp-writer DEVICE BLOCKS ROUNDS\n");
        return 2;
    }
    uint64_t blocks = strtoull(argv[2], NULL, 10), rounds = strtoull(argv[3], NULL, 10);
    int fd = open(argv[1], O_WRONLY | O_DIRECT);
    if (fd < 0) {
        perror("open");
        return 2;
    }
    uint64_t *buf;
    if (posix_memalign((void **)&buf, BLOCK, BLOCK)) {
        perror("posix_memalign");
        return 2;
    }
    for (uint64_t round = 1; round <= rounds; round++) {
        printf("ROUND-START %llu\n", (unsigned long long)round);
        fflush(stdout);
        for (uint64_t step = 0; step < blocks; step++) {
            uint64_t block = step % 2 == 0 ? step / 2 : blocks - 1 - step / 2;
            for (int i = 0; i < BLOCK / 8; i += 2) {
                buf[i] = block;
                buf[i + 1] = round;
            }
            if (pwrite(fd, buf, BLOCK, (off_t)(block * BLOCK)) != BLOCK) {
                perror("pwrite");
                return 1;
            }
        }
        if (fdatasync(fd)) {
            perror("fdatasync");
            return 1;
        }
        printf("ROUND-DONE %llu\n", (unsigned long long)round);
        fflush(stdout);
    }
    return 0;
}
