# test_tools_packages: tools/packages.txt, the one package list, and
# tools/install-deps.sh that the README's commands, .ci/run and the device
# scripts read it with (tests/tools/packages.sh).
find_program(AA_BASH bash)
if(AA_BASH)
  add_test(NAME test_tools_packages
    COMMAND ${AA_BASH} ${CMAKE_CURRENT_LIST_DIR}/tools/packages.sh ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_tools_packages PROPERTIES LABELS tools TIMEOUT 60)
endif()
