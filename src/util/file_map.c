/*
 * file_map.c - mmap of model files and whole-file reads of small ones.
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

int pdl_file_map_open(pdl_file_map *map, const char *path, pdl_error *err) {
    memset(map, 0, sizeof *map);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pdl_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return pdl_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pdl_fail(err, "%s: not a regular file", path);
    }
    map->size = (size_t)st.st_size;
    if (map->size > 0) {
        void *p = mmap(NULL, map->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return pdl_fail(err, "%s: cannot mmap %zu bytes: %s", path, map->size, strerror(e));
        }
        map->data = p;
    }
    close(fd);
    map->path = strdup(path);
    if (!map->path) {
        pdl_file_map_close(map);
        return pdl_fail(err, "%s: out of memory", path);
    }
    return 0;
}

void pdl_file_map_close(pdl_file_map *map) {
    if (map->data) munmap((void *)map->data, map->size);
    free(map->path);
    memset(map, 0, sizeof *map);
}

int pdl_file_map_release(const pdl_file_map *map, const void *p, size_t n) {
    const uint8_t *b = p;
    if (!map->data || b < map->data || n > map->size || (size_t)(b - map->data) > map->size - n) return 0;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)b + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t hi = ((uintptr_t)b + n) / (uintptr_t)page * (uintptr_t)page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return 1;
}

int pdl_read_file(const char *path, char **out, size_t *len, pdl_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return pdl_fail(err, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return pdl_fail(err, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return pdl_fail(err, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return pdl_fail(err, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return 0;
}
