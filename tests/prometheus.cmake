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

# test_http_grafana_schema: examples/grafana/adaptalloc.json checked against
# Grafana's published dashboard schema (@grafana/schema's Dashboard type and
# each panel plugin's options, compiled by TypeScript:
# tests/grafana/check_dashboard.mjs). Needs node and the two npm packages of
# tests/grafana/package-lock.json (npm ci --prefix tests/grafana, which
# tools/run-tests.sh and so CI do); skips (77) without them, fails instead
# with AA_REQUIRE_SCHEMA_CHECK=1 (.ci/run sets it).
add_test(NAME test_http_grafana_schema
  COMMAND sh -c "command -v node >/dev/null 2>&1 || { echo 'node not found'; \
[ \"$AA_REQUIRE_SCHEMA_CHECK\" = 1 ] && exit 1; exit 77; }; exec node \"$0\" \"$1\" \"$2\""
    ${CMAKE_CURRENT_LIST_DIR}/grafana/check_dashboard.mjs
    ${PROJECT_SOURCE_DIR}/examples/grafana/adaptalloc.json
    ${PROJECT_BINARY_DIR}/grafana-schema)
set_tests_properties(test_http_grafana_schema PROPERTIES
  LABELS "http;grafana" TIMEOUT 120 SKIP_RETURN_CODE 77)

# test_http_alert_runbooks: every alert of the shipped rules has a
# runbook_url whose anchor is a heading of docs/operating.md (GitHub's
# anchors), and a summary. No Prometheus needed.
if(Python3_Interpreter_FOUND)
  add_test(NAME test_http_alert_runbooks
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/prometheus/check_runbooks.py
      ${PROJECT_SOURCE_DIR}/examples/prometheus/adaptalloc-rules.yml
      ${PROJECT_SOURCE_DIR}/docs/operating.md)
  set_tests_properties(test_http_alert_runbooks PROPERTIES LABELS "http;prometheus" TIMEOUT 60)
endif()
