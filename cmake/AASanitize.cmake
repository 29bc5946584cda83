# AA_SANITIZE=address -> ASan + UBSan; AA_SANITIZE=thread -> TSan.
if(AA_SANITIZE STREQUAL "address")
  set(_aa_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(AA_SANITIZE STREQUAL "thread")
  set(_aa_san -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT AA_SANITIZE STREQUAL "")
  message(FATAL_ERROR "AA_SANITIZE must be '', 'address' or 'thread' (got '${AA_SANITIZE}')")
endif()
if(DEFINED _aa_san)
  add_compile_options(${_aa_san})
  add_link_options(${_aa_san})
  add_compile_definitions(AA_SANITIZER_BUILD=1)
endif()

# Fuzz builds instrument the whole library for coverage (libFuzzer) and run
# it under ASan+UBSan.
if(AA_BUILD_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "AA_BUILD_FUZZ needs clang (CC=clang CXX=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(AA_FUZZING=1)
endif()
