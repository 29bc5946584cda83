# tests/soak.cmake — a short soak (150 s: the first 50 s, two and a half cycles of the demo's sequence lengths, are the warm-up) of adaptalloc-demo under wrk load on
# /stats with a policy PATCH every second (tools/soak.sh), registered only
# when wrk, curl and python3 are installed and the server is built.
# Labelled "soak": skip it with `ctest -LE soak`, run it alone with `ctest -L soak`.
find_program(AA_WRK_PROGRAM wrk)
find_program(AA_CURL_PROGRAM curl)
find_program(AA_PYTHON3_PROGRAM python3)
if(AA_WITH_HTTP AND AA_WRK_PROGRAM AND AA_CURL_PROGRAM AND AA_PYTHON3_PROGRAM
   AND TARGET adaptalloc-demo)
  add_test(NAME soak_short
    COMMAND bash ${PROJECT_SOURCE_DIR}/tools/soak.sh --seconds 150
            --demo $<TARGET_FILE:adaptalloc-demo>)
  set_tests_properties(soak_short PROPERTIES LABELS soak TIMEOUT 400 RUN_SERIAL TRUE)
endif()
