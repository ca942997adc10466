/*
 * json_file.c - whole-file JSON parsing with located error messages.
 */
#include "util/json_file.h"

#include <stdlib.h>

#include "util/error.h"
#include "util/file_map.h"

int json_file_load(const char *path, size_t flags, json_t **out, pdl_error *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    if (file_read(path, PDL_READ_MAX_JSON, &text, &len, err)) return -1;
    json_error_t je;
    *out = json_loadb(text, len, flags, &je);
    free(text);
    if (!*out)
        return err_fail(err, "%s: invalid JSON at line %d, column %d (offset %d): %s", path, je.line, je.column,
                        je.position, je.text);
    return 0;
}
