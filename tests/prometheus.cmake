# test_http_prometheus_ranks: real Prometheus on loopback scrapes two
# adaptalloc-demo processes (RANK 0 and 1, each its own database and port),
# then every panel query of examples/grafana/adaptalloc.json and every rule of
# examples/prometheus/adaptalloc-rules.yml is evaluated through Prometheus's
# HTTP API and must return series for both ranks; promtool checks the rules,
# their unit tests and examples/prometheus.yml. Skips (77) without prometheus
# or promtool (Debian's "prometheus", tools/packages.txt "ci").
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET adaptalloc-demo AND Python3_Interpreter_FOUND)
  add_test(NAME test_http_prometheus_ranks
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/prometheus/scrape_ranks.py
      --demo $<TARGET_FILE:adaptalloc-demo>
      --source ${PROJECT_SOURCE_DIR}
      --work ${PROJECT_BINARY_DIR}/prometheus-ranks)
  set_tests_properties(test_http_prometheus_ranks PROPERTIES
    LABELS "http;prometheus" TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
