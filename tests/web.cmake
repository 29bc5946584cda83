# test_web_figures: the dashboard's figures (web/figures.js: the loop
# panel's measured effect in the prediction's scope, the internal-waste card
# as the class rows' mean) under node's own test runner, no browser or npm
# package; registered only when node exists.
find_program(AA_NODE_WEB node)
if(AA_NODE_WEB)
  add_test(NAME test_web_figures
    COMMAND ${AA_NODE_WEB} --test ${CMAKE_CURRENT_LIST_DIR}/web/figures.test.mjs)
  set_tests_properties(test_web_figures PROPERTIES LABELS web TIMEOUT 60)
else()
  message(STATUS "adaptalloc: node not found: test_web_figures not registered")
endif()
