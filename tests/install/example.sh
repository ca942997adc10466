#!/bin/sh
# example.sh - the installed library as an embedder meets it: `cmake
# --install` into a prefix inside the build folder, the layout (program,
# versioned shared library, header, pkg-config file), then README.md's
# example program (between its "example generate.c" markers, which must
# equal examples/generate.c) built with `cc $(pkg-config --cflags --libs
# pagedlm)` alone and run on stories260K: it must print text.
#
# Usage: example.sh BUILD_DIR SOURCE_DIR   (CTest: install_example; env:
# PAGEDLM_TESTDATA, CC, PDL_EXAMPLE_CFLAGS for the sanitizer build)
set -eu
build=$1
src=$2
prefix=$build/install-test
work=$build/install-test-work
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
rm -rf "$prefix" "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || {
    cat "$work/install.log" >&2
    fail "cmake --install $build --prefix $prefix"
}

# the layout
[ -x "$prefix/bin/pagedlm" ] || fail "no bin/pagedlm in $prefix"
[ -f "$prefix/include/pagedlm.h" ] || fail "no include/pagedlm.h in $prefix"
pc=$(find "$prefix" -name pagedlm.pc -path '*/pkgconfig/*')
[ -n "$pc" ] || fail "no pkgconfig/pagedlm.pc in $prefix"
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
libdir=$(pkg-config --variable=libdir pagedlm)
version=$(pkg-config --modversion pagedlm)
major=${version%%.*}
[ "$(readlink "$libdir/libpagedlm.so")" = "libpagedlm.so.$major" ] ||
    fail "$libdir/libpagedlm.so is not a link to libpagedlm.so.$major"
[ "$(readlink "$libdir/libpagedlm.so.$major")" = "libpagedlm.so.$version" ] ||
    fail "$libdir/libpagedlm.so.$major is not a link to libpagedlm.so.$version"
[ -f "$libdir/libpagedlm.so.$version" ] || fail "no $libdir/libpagedlm.so.$version"
objdump -p "$libdir/libpagedlm.so.$version" | grep -q "SONAME *libpagedlm.so.$major\$" ||
    fail "libpagedlm.so.$version's soname is not libpagedlm.so.$major"
[ -f "$libdir/libpagedlm.a" ] || fail "no $libdir/libpagedlm.a"

# README's program is examples/generate.c
awk '/<!-- example generate.c: end/ {on = 0} on && !/^```/ {print} /<!-- example generate.c: begin/ {on = 1}' \
    "$src/README.md" >"$work/generate.c"
[ -s "$work/generate.c" ] || fail "README.md has no block between the 'example generate.c' markers"
cmp -s "$work/generate.c" "$src/examples/generate.c" ||
    fail "README.md's example differs from examples/generate.c (keep them equal): $(diff "$work/generate.c" "$src/examples/generate.c" | head -5)"

# built with what pkg-config says and nothing of the source tree
# shellcheck disable=SC2046,SC2086
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror ${PDL_EXAMPLE_CFLAGS:-} "$work/generate.c" \
    $(pkg-config --cflags --libs pagedlm) -o "$work/generate" || fail "the example does not build"
LD_LIBRARY_PATH=$libdir ldd "$work/generate" | grep -q "libpagedlm.so.$major => $libdir/" ||
    fail "the example does not load $libdir/libpagedlm.so.$major"

model=${PAGEDLM_TESTDATA:?}/models/stories260K/stories260K.gguf
[ -f "$model" ] || fail "no test model $model"
rc=0
LD_LIBRARY_PATH=$libdir "$work/generate" "$model" "Once upon a time" >"$work/out.txt" 2>"$work/err.txt" || rc=$?
if [ "$rc" -ne 0 ]; then
    cat "$work/err.txt" >&2
    fail "the example exited with status $rc"
fi
words=$(tr -cs 'A-Za-z' '\n' <"$work/out.txt" | grep -c .) || true
[ "$words" -ge 3 ] || fail "the example printed no text: '$(cat "$work/out.txt")'"
echo "ok: installed into $prefix; the example printed: $(head -c 200 "$work/out.txt")"
