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
  # test_layers_large: the large path's own floors (large_internal.h), over
  # its object files alone
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/large-objects.txt
    CONTENT "$<JOIN:$<FILTER:$<TARGET_OBJECTS:aa_core>,INCLUDE,/large[a-z_]*\\.c\\.o$>,\n>\n")
  add_test(NAME test_layers_large
    COMMAND ${AA_BASH} ${PROJECT_SOURCE_DIR}/tools/check-layers.sh
            ${PROJECT_SOURCE_DIR}/core/src/large_internal.h
            ${PROJECT_BINARY_DIR}/large-objects.txt ${CMAKE_NM})
  set_tests_properties(test_layers_large PROPERTIES LABELS core TIMEOUT 60)
endif()
if(AA_BASH)
  add_test(NAME test_core_walls_refuse
    COMMAND ${AA_BASH} ${PROJECT_SOURCE_DIR}/tests/layers_walls_selftest.sh
            ${PROJECT_SOURCE_DIR}/core/src ${PROJECT_BINARY_DIR}/core-objects.txt ${CMAKE_NM})
  set_tests_properties(test_core_walls_refuse PROPERTIES LABELS core TIMEOUT 300
    ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
endif()

# test_layers_<module>: the same check over every other module's floors (the
# layer list in its internal header; no walls outside core).
if(AA_BASH)
  set(_aa_layer_mods "adapt|adapt/layers.h|aa_policy aa_loop aa_replay"
    "runtime|runtime/src/runtime_internal.h|aa_runtime"
    "torch|torch/src/torch_internal.h|aa_torch_stats aa_torch_devices")
  if(AA_WITH_HTTP)
    list(APPEND _aa_layer_mods "http|http/src/http_internal.h|aa_http")
  endif()
  if(AA_WITH_STORE)
    list(APPEND _aa_layer_mods "store|store/src/store_internal.h|aa_store")
  endif()
  foreach(spec IN LISTS _aa_layer_mods)
    string(REPLACE "|" ";" spec "${spec}")
    list(GET spec 0 mod)
    list(GET spec 1 hdr)
    list(GET spec 2 tgts)
    string(REPLACE " " ";" tgts "${tgts}")
    set(_objs "")
    foreach(t IN LISTS tgts)
      list(APPEND _objs "$<JOIN:$<TARGET_OBJECTS:${t}>,\n>")
    endforeach()
    string(JOIN "\n" _objs ${_objs})
    file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/${mod}-objects.txt CONTENT "${_objs}\n")
    add_test(NAME test_layers_${mod}
      COMMAND ${AA_BASH} ${PROJECT_SOURCE_DIR}/tools/check-layers.sh
              ${PROJECT_SOURCE_DIR}/${hdr} ${PROJECT_BINARY_DIR}/${mod}-objects.txt ${CMAKE_NM})
    set_tests_properties(test_layers_${mod} PROPERTIES LABELS ${mod} TIMEOUT 60)
  endforeach()
  # the check refuses an upward call in a module without walls
  if(AA_WITH_HTTP)
    add_test(NAME test_layers_refuse
      COMMAND ${AA_BASH} ${PROJECT_SOURCE_DIR}/tests/layers_floors_selftest.sh
              ${PROJECT_SOURCE_DIR}/http/src ${PROJECT_BINARY_DIR}/http-objects.txt ${CMAKE_NM})
    set_tests_properties(test_layers_refuse PROPERTIES LABELS http TIMEOUT 60)
  endif()
endif()
