# test_readme_c_example: the README's C example ("The C API: a complete
# program"), taken from README.md at configure time (tests/readme/block.cmake;
# editing the README re-runs CMake), built in-tree with the project's warnings
# against the allocator alone (adaptalloc_core, as the README's pkg-config
# line links it) and run: it must print its two blocks and exit 0.
# tests/install/check.cmake builds the same block against an installed tree.
include(${CMAKE_CURRENT_LIST_DIR}/readme/block.cmake)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/README.md)
aa_readme_c_block(${PROJECT_SOURCE_DIR}/README.md ${CMAKE_CURRENT_BINARY_DIR}/readme_example.c)
add_executable(readme_example ${CMAKE_CURRENT_BINARY_DIR}/readme_example.c)
target_link_libraries(readme_example PRIVATE adaptalloc_core)
add_test(NAME test_readme_c_example COMMAND readme_example)
set_tests_properties(test_readme_c_example PROPERTIES LABELS "readme"
  PASS_REGULAR_EXPRESSION "4 KiB at 0x[0-9a-f]+, 8 MiB at 0x[0-9a-f]+")
