# aa_add_module(<name> ENABLED <bool> [DEPS <targets>...] [DEFS <defs>...])
#
# Builds the OBJECT library aa_<name> from <name>/src/*.c when ENABLED, or
# from <name>/src/stub/*.c (functions that return AA_ENOTSUP) when the
# feature is configured out. Sources are globbed so that each module owns its
# file list without touching shared CMake files.
function(aa_add_module name)
  cmake_parse_arguments(M "" "ENABLED" "DEPS;DEFS" ${ARGN})
  if(M_ENABLED)
    file(GLOB _src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.c)
  else()
    file(GLOB _src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/stub/*.c)
  endif()
  if(NOT _src)
    set(_src ${PROJECT_SOURCE_DIR}/cmake/empty.c)
  endif()
  add_library(aa_${name} OBJECT ${_src})
  target_include_directories(aa_${name}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_compile_definitions(aa_${name} PRIVATE AA_BUILDING_LIB=1 ${M_DEFS})
  # aa_util_headers: the string builder, JSON writer and strict JSON check
  target_link_libraries(aa_${name} PUBLIC aa_core_headers ${M_DEPS} PRIVATE aa_util_headers)
endfunction()
