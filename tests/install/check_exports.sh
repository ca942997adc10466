#!/bin/sh
# check_exports.sh - libpagedlm.so exports exactly the functions that
# include/pagedlm.h declares: none of the internal modules' functions (the
# library is compiled with -fvisibility=hidden; the header's visibility
# pragma makes its declarations public), and every public one.
#
# Usage: check_exports.sh LIBPAGEDLM_SO PAGEDLM_H   (CTest: library_exports)
set -eu
so=$1
header=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the header's functions: pdl_NAME followed by "(", outside comments (a
# function-pointer typedef's name is followed by ")")
perl -0777 -ne 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g; print "$1\n" while /\b(pdl_\w+)\s*\(/g' "$header" |
    sort -u >"$tmp/declared"
# the library's defined dynamic symbols, less the linker's own
nm -D --defined-only "$so" | awk '{print $NF}' |
    grep -v -x -e _init -e _fini -e _edata -e _end -e __bss_start | sort -u >"$tmp/exported"

status=0
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "FAIL: $so exports symbols that $header does not declare (internal functions must stay hidden):" >&2
    echo "$extra" | sed 's/^/  /' >&2
    status=1
fi
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then
    echo "FAIL: $header declares functions that $so does not export (not defined, or defined in a file" \
         "that does not include pagedlm.h):" >&2
    echo "$missing" | sed 's/^/  /' >&2
    status=1
fi
[ "$status" -eq 0 ] && echo "ok: $(wc -l <"$tmp/exported") functions exported, all declared in pagedlm.h"
exit "$status"
