# Replays every fuzz target's corpus as a regression test (see tests/fuzz/).
if(NOT AA_BUILD_FUZZ)
  include(${CMAKE_CURRENT_LIST_DIR}/fuzz/CMakeLists.txt)
endif()
