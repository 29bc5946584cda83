# Warnings: the project builds clean under -Wall -Wextra -Wpedantic -Wshadow.
set(AA_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wpointer-arith -Wformat=2 -Wundef)
set(AA_CXX_WARNINGS -Wall -Wextra -Wshadow)
if(AA_WERROR)
  list(APPEND AA_WARNINGS -Werror)
  list(APPEND AA_CXX_WARNINGS -Werror)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C>:${AA_WARNINGS}>"
                    "$<$<COMPILE_LANGUAGE:CXX>:${AA_CXX_WARNINGS}>")
