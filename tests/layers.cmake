# test_core_layers: core's files call down their layers, never up
# (tools/check-layers.sh over aa_core's objects and the layer list in
# core/src/core_internal.h).
find_program(AA_BASH bash)
if(AA_BASH)
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/core-objects.txt
    CONTENT "$<JOIN:$<TARGET_OBJECTS:aa_core>,\n>\n")
  add_test(NAME test_core_layers
    COMMAND ${AA_BASH} ${PROJECT_SOURCE_DIR}/tools/check-layers.sh
            ${PROJECT_SOURCE_DIR}/core/src/core_internal.h
            ${PROJECT_BINARY_DIR}/core-objects.txt ${CMAKE_NM})
  # the walls strip comments with the C compiler
  set_property(TEST test_core_layers PROPERTY ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
  set_tests_properties(test_core_layers PROPERTIES LABELS core TIMEOUT 60)
endif()
if(AA_BASH)
  add_test(NAME test_core_walls_refuse
    COMMAND ${AA_BASH} ${PROJECT_SOURCE_DIR}/tests/layers_walls_selftest.sh
            ${PROJECT_SOURCE_DIR}/core/src ${PROJECT_BINARY_DIR}/core-objects.txt ${CMAKE_NM})
  set_tests_properties(test_core_walls_refuse PROPERTIES LABELS core TIMEOUT 300
    ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
endif()
