# test_python_package: the Python package installed offline into a fresh
# venv, then the torch-free pytest suite (tests/python/run.sh; skips, exit
# 77, when the interpreter lacks venv/pytest/setuptools/headers). Not in
# sanitizer builds: the package builds its own library in Release.
if(NOT AA_SANITIZE)
  add_test(NAME test_python_package
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/python/run.sh)
  set_tests_properties(test_python_package PROPERTIES LABELS python TIMEOUT 900
    SKIP_RETURN_CODE 77)
endif()
