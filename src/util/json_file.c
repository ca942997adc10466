/*
 * json_file.c - whole-file JSON parsing with located error messages.
 */
#include "util/json_file.h"

#include <stdlib.h>

#include "util/error.h"
#include "util/file_map.h"

int pdl_json_load_file(const char *path, size_t flags, json_t **out, pdl_error *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    if (pdl_read_file(path, PDL_READ_MAX_JSON, &text, &len, err)) return -1;
    json_error_t je;
    *out = json_loadb(text, len, flags, &je);
    free(text);
    if (!*out)
        return pdl_fail(err, "%s: invalid JSON at line %d, column %d (offset %d): %s", path, je.line, je.column,
                        je.position, je.text);
    return 0;
}
