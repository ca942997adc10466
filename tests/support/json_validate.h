/*
 * json_validate.h - a small JSON Schema validator for the grammar tests,
 * written apart from the schema compiler (src/grammar/gram_schema.c) so a
 * generated output is checked against the schema's meaning, not against the
 * compiler's own reading of it.
 *
 * Keywords: type, enum, const, properties, required, additionalProperties,
 * items, prefixItems, additionalItems, minItems, maxItems, minLength,
 * maxLength, pattern (PCRE2, search semantics as JSON Schema says), format
 * (date, time, date-time, uuid, email: hand-written checks), minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum, anyOf, oneOf (exactly one),
 * allOf, $ref (pointers into the same document), nullable.
 */
#ifndef PDL_TEST_JSON_VALIDATE_H
#define PDL_TEST_JSON_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether instance is valid under schema (doc: the whole schema document,
 * for $ref). On failure why[] says where and what. */
bool jv_validate(json_t *instance, json_t *schema, json_t *doc, char *why, size_t why_cap);

/* Whether text[0..n) is exactly one JSON value (RFC 8259, no surrounding
 * whitespace), by a small recursive-descent reader: numbers of any size are
 * fine here, unlike in jansson. */
bool jv_syntax_ok(const char *text, size_t n);

/* The format checks on their own (exposed for their own tests). */
bool jv_is_date(const char *s);
bool jv_is_time(const char *s);
bool jv_is_date_time(const char *s);
bool jv_is_uuid(const char *s);
bool jv_is_email(const char *s);

#endif
