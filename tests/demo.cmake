# test_demo_smoke: the main job for 3 seconds with the whole runtime on
# (store in the build tree, the policy loop, the server on a free port):
# it must exit 0 and leave a database with a run in it.
if(TARGET adaptalloc-demo)
  add_test(NAME test_demo_smoke
    COMMAND ${CMAKE_COMMAND} -E env
      ADAPTALLOC_DB=${PROJECT_BINARY_DIR}/demo-smoke.db ADAPTALLOC_HTTP=127.0.0.1:0
      ADAPTALLOC_POLICY_DIR=${PROJECT_SOURCE_DIR}/policies
      $<TARGET_FILE:adaptalloc-demo> --seconds 3 --quiet)
  set_tests_properties(test_demo_smoke PROPERTIES LABELS demo TIMEOUT 60)
endif()

# test_adapt_demo (a cmocka test, tests/test_adapt_demo.c) runs the demo's
# workload: it is built with tools/demo/workload.c.
if(TARGET test_adapt_demo)
  target_sources(test_adapt_demo PRIVATE ${PROJECT_SOURCE_DIR}/tools/demo/workload.c)
  target_include_directories(test_adapt_demo PRIVATE ${PROJECT_SOURCE_DIR}/tools/demo)
endif()
