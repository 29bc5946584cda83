# test_cli: the command line for a running job (python/adaptalloc/cli.py,
# stdlib only) against aa_http_testserver and against adaptalloc-demo (the
# runtime's own token file, found by the CLI by itself): tests/cli/test_cli.py.
# Registered when a python3 is found and the build has the HTTP server
# (aa_http_testserver, made in http.cmake, which runs after this file).
find_program(AA_PYTHON3_CLI python3)
if(AA_PYTHON3_CLI AND AA_WITH_HTTP AND TARGET adaptalloc-demo)
  add_test(NAME test_cli COMMAND ${AA_PYTHON3_CLI} ${CMAKE_CURRENT_LIST_DIR}/cli/test_cli.py)
  set_tests_properties(test_cli PROPERTIES LABELS "cli;http" TIMEOUT 180
    ENVIRONMENT "AA_TESTSERVER=$<TARGET_FILE:aa_http_testserver>;AA_DEMO=$<TARGET_FILE:adaptalloc-demo>")
endif()
