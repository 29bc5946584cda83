# HTTP test helpers (included by tests/CMakeLists.txt):
#  - aa_http_testserver: the real server over real core pools with a workload
#    and adapt's policy handling (tests/browser/testserver.c), for the
#    browser test and for looking at the dashboard by hand;
#  - test_http_browser: tests/browser/dashboard.test.mjs in headless Debian
#    chromium through playwright-core, registered only when node and
#    chromium exist; it skips (exit 77) without tests/browser/node_modules
#    (npm ci --prefix tests/browser). Screenshot: <build>/browser/dashboard.png.
if(NOT AA_WITH_HTTP)
  # tests/fuzz/fuzz_http.c drives the server's internals, which a build
  # without HTTP does not have: keep its targets out of "all" and its corpus
  # test disabled.
  foreach(t fuzz_http fuzz_http_corpus)
    if(TARGET ${t})
      set_target_properties(${t} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  if(TEST test_fuzz_http_corpus)
    set_tests_properties(test_fuzz_http_corpus PROPERTIES DISABLED TRUE)
  endif()
  return()
endif()
add_executable(aa_http_testserver ${CMAKE_CURRENT_LIST_DIR}/browser/testserver.c)
target_link_libraries(aa_http_testserver PRIVATE adaptalloc_static aa_util_headers)

find_program(AA_NODE node)
find_program(AA_CHROMIUM NAMES chromium chromium-browser)
if(AA_NODE AND AA_CHROMIUM)
  add_test(NAME test_http_browser
    COMMAND ${AA_NODE} ${CMAKE_CURRENT_LIST_DIR}/browser/dashboard.test.mjs
      --server $<TARGET_FILE:aa_http_testserver>
      --out ${PROJECT_BINARY_DIR}/browser
      --chromium ${AA_CHROMIUM})
  set_tests_properties(test_http_browser PROPERTIES
    LABELS "http;browser" TIMEOUT 180 SKIP_RETURN_CODE 77)
else()
  message(STATUS "adaptalloc: node or chromium not found: test_http_browser not registered")
endif()
