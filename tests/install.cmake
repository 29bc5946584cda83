# test_install_consumer: cmake --install into a scratch prefix, then a
# downstream project builds against it with find_package and pkg-config.
if(NOT AA_SANITIZE)
  add_test(NAME test_install_consumer
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
            -DWORK_DIR=${PROJECT_BINARY_DIR}/install-check -P ${CMAKE_CURRENT_LIST_DIR}/install/check.cmake)
  set_tests_properties(test_install_consumer PROPERTIES LABELS install TIMEOUT 300)
endif()
