# aa_test_internal_headers(<target> <source>)
#
# A test sees the modules' public headers (adaptalloc_static) and util's
# internal one (aa_util_headers), never a module's src/: what it needs of a
# module's internals it reaches through that module's one test-only header,
# <module>/test/<module>_test.h, which includes the private headers it
# exposes. This puts on <target>'s include path the folders of exactly the
# test-only headers <source> includes; a <name>_test.h with no module here
# stops the configure. Used by tests/CMakeLists.txt and tests/fuzz.
function(aa_test_internal_headers target src)
  set(dir_core ${PROJECT_SOURCE_DIR}/core/test)
  set(dir_transfer ${PROJECT_SOURCE_DIR}/transfer/test)
  set(dir_policy ${PROJECT_SOURCE_DIR}/adapt/policy/test)
  set(dir_http ${PROJECT_SOURCE_DIR}/http/test)
  set(dir_runtime ${PROJECT_SOURCE_DIR}/runtime/test)
  set(dir_torch ${PROJECT_SOURCE_DIR}/torch/test)
  file(STRINGS ${src} incs REGEX "^#include \"[a-z]+_test\\.h\"")
  foreach(line IN LISTS incs)
    string(REGEX MATCH "\"([a-z]+)_test\\.h\"" h "${line}")
    set(m ${CMAKE_MATCH_1})
    if(NOT DEFINED dir_${m})
      message(FATAL_ERROR "${src}: no module has a test-only header ${m}_test.h "
                          "(cmake/AATestHeaders.cmake)")
    endif()
    target_include_directories(${target} PRIVATE ${dir_${m}})
  endforeach()
endfunction()
