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

# test_http_grafana_preview: the shipped dashboard drawn from that scrape
# (tools/grafana-screenshot.sh: two demo ranks, real Prometheus, the page of
# tools/grafana_preview.py and, with chromium and playwright-core, its
# picture); every panel is one element with its title and every query has
# series for both ranks. Skips (77) without prometheus; without chromium or
# tests/browser/node_modules it checks the page and takes no picture.
# Labelled browser so that the sanitizer runs of .ci/run leave it out.
if(TARGET adaptalloc-demo AND Python3_Interpreter_FOUND)
  add_test(NAME test_http_grafana_preview
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/prometheus/grafana_preview.py
      --build ${PROJECT_BINARY_DIR}
      --source ${PROJECT_SOURCE_DIR}
      --work ${PROJECT_BINARY_DIR}/grafana-preview)
  set_tests_properties(test_http_grafana_preview PROPERTIES
    LABELS "http;prometheus;browser" TIMEOUT 150 SKIP_RETURN_CODE 77)
endif()
