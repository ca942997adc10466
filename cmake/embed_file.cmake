# embed_file.cmake - a file's bytes as a C array, for what the binary serves
# as it is (the server's chat page): cmake -DIN=FILE -DOUT=FILE.c -DNAME=sym
# -P embed_file.cmake writes `const unsigned char NAME[]` (NUL-terminated)
# and `const size_t NAME_len` (the file's size) into OUT.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
get_filename_component(src "${IN}" NAME)
file(WRITE "${OUT}.tmp" "/* generated from ${src} by cmake/embed_file.cmake: do not edit */\n#include <stddef.h>\n"
     "const unsigned char ${NAME}[] = {${bytes}0};\nconst size_t ${NAME}_len = ${n};\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
