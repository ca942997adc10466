/*
 * file_map.c - mmap of model files, bounded reads of small ones, and the
 * regular-file check both go through.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include "util/file_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"

/* Opens path for reading if it is a regular file; *size gets its size.
 * O_NONBLOCK: opening a FIFO would otherwise wait for a writer. */
static int open_regular(const char *path, size_t *size, pdl_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return err_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_fail(err, "%s: not a regular file (%s)", path,
                        S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISSOCK(st.st_mode) ? "a socket"
                                                                                         : "not a file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *size = (size_t)st.st_size;
    return fd;
}

int file_map_open(pdl_file_map *map, const char *path, pdl_error *err) {
    memset(map, 0, sizeof *map);
    int fd = open_regular(path, &map->size, err);
    if (fd < 0) return -1;
    if (map->size > 0) {
        void *p = mmap(NULL, map->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return err_fail(err, "%s: cannot mmap %zu bytes: %s", path, map->size, strerror(e));
        }
        map->data = p;
    }
    close(fd);
    map->path = strdup(path);
    if (!map->path) {
        file_map_close(map);
        return err_fail(err, "%s: out of memory", path);
    }
    return 0;
}

void file_map_close(pdl_file_map *map) {
    if (map->data) munmap((void *)map->data, map->size);
    free(map->path);
    memset(map, 0, sizeof *map);
}

int file_map_release(const pdl_file_map *map, const void *p, size_t n) {
    const uint8_t *b = p;
    if (!map->data || b < map->data || n > map->size || (size_t)(b - map->data) > map->size - n) return 0;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)b + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t hi = ((uintptr_t)b + n) / (uintptr_t)page * (uintptr_t)page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return 1;
}

int file_read(const char *path, size_t max_bytes, char **out, size_t *len, pdl_error *err) {
    *out = NULL;
    if (len) *len = 0;
    size_t size;
    int fd = open_regular(path, &size, err);
    if (fd < 0) return -1;
    if (size > max_bytes) {
        close(fd);
        return err_fail(err, "%s: %zu bytes; a file of this kind may have at most %zu", path, size, max_bytes);
    }
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return err_fail(err, "%s: out of memory for %zu bytes", path, size);
    }
    size_t n = 0;
    while (n < size) { /* a file that shrinks meanwhile ends early; one that grows is read to its old size */
        ssize_t got = read(fd, buf + n, size - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return err_fail(err, "%s: read error at offset %zu: %s", path, n, strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return 0;
}

FILE *file_open_regular(const char *path, pdl_error *err) {
    size_t size;
    int fd = open_regular(path, &size, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        err_fail(err, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

long long file_read_line(FILE *f, char **buf, size_t *cap, size_t max) {
    size_t n = 0;
    int c;
    while ((c = getc_unlocked(f)) != EOF) {
        if (n + 2 > *cap) {
            if (n >= max) return -1; /* longer than max */
            size_t want = *cap ? *cap * 2 : 4096;
            if (want > max + 2) want = max + 2;
            char *nb = realloc(*buf, want);
            if (!nb) {
                errno = ENOMEM;
                return -1;
            }
            *buf = nb;
            *cap = want;
        }
        (*buf)[n++] = (char)c;
        if (c == '\n') break;
    }
    if (*cap == 0) {
        if (!(*buf = malloc(1))) return -1;
        *cap = 1;
    }
    (*buf)[n] = '\0';
    return (long long)n;
}
