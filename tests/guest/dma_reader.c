/*
 * Guest side of the migration test: reads a disk region with O_DIRECT into memory that no CPU
 * writes afterwards (only the device does, by DMA), while the host migrates the VM, and checks
 * it on the destination. A page the backend wrote without marking it in the dirty log arrives
 * as it was before the read.
 *
 * usage: dma-reader DEVICE MIB MAILBOX
 * Prints DMA-READY once its buffer is written (so the migration's first round copies it),
 * waits until MAILBOX's first sector starts with "MIGR", reads, prints READ-DONE, waits for
 * "DONE", reads the region again into fresh memory and prints DMA-STALE-PAGES N.
 *
 * Until the read is done, a thread keeps writing a few pages, so that no round of the
 * migration finds too little left to copy and switches over before the read (the test holds
 * the switch-over with a 1 ms downtime limit until it sees READ-DONE).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096
#define CHUNK (1 << 20)

static char *buffer(size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    /* Each page on its own (no huge page a later collapse would copy). */
    madvise(p, len, MADV_NOHUGEPAGE);
    return p;
}

#define BUSY_PAGES 256

static volatile int busy = 1;

static void *keep_dirtying(void *unused)
{
    (void)unused;
    volatile char *pages = buffer(BUSY_PAGES * PAGE);
    for (unsigned long n = 0; busy; n++)
        pages[(n % BUSY_PAGES) * PAGE] = (char)n;
    return NULL;
}

static void wait_for(const char *mailbox, const char *word)
{
    char *sector = buffer(PAGE);
    for (;;) {
        int fd = open(mailbox, O_RDONLY | O_DIRECT);
        if (fd >= 0 && pread(fd, sector, 512, 0) == 512 && memcmp(sector, word, 4) == 0) {
            close(fd);
            break;
        }
        if (fd >= 0)
            close(fd);
        usleep(200000);
    }
    munmap(sector, PAGE);
}

static void read_into(const char *device, char *to, size_t len)
{
    int fd = open(device, O_RDONLY | O_DIRECT);
    if (fd < 0) {
        perror(device);
        exit(2);
    }
    for (size_t at = 0; at < len; at += CHUNK) {
        if (pread(fd, to + at, CHUNK, (off_t)at) != CHUNK) {
            perror("pread");
            exit(2);
        }
    }
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: dma-reader DEVICE MIB MAILBOX\n");
        return 2;
    }
    size_t len = (size_t)atol(argv[2]) << 20;
    char *target = buffer(len);
    memset(target, 0xa5, len);
    pthread_t dirtier;
    if (pthread_create(&dirtier, NULL, keep_dirtying, NULL) != 0) {
        perror("pthread_create");
        return 2;
    }
    printf("DMA-READY\n");
    fflush(stdout);
    wait_for(argv[3], "MIGR");
    read_into(argv[1], target, len);
    busy = 0;
    pthread_join(dirtier, NULL);
    printf("READ-DONE\n");
    fflush(stdout);
    wait_for(argv[3], "DONE");
    char *check = buffer(len);
    read_into(argv[1], check, len);
    size_t stale = 0;
    for (size_t at = 0; at < len; at += PAGE)
        stale += memcmp(target + at, check + at, PAGE) != 0;
    printf("DMA-STALE-PAGES %zu\n", stale);
    fflush(stdout);
    return stale != 0;
}
