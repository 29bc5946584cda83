# test_tools_packages: tools/packages.txt, the one package list, and
# tools/install-deps.sh that the README's commands, .ci/run and the device
# scripts read it with (tests/tools/packages.sh).
find_program(AA_BASH bash)
if(AA_BASH)
  add_test(NAME test_tools_packages
    COMMAND ${AA_BASH} ${CMAKE_CURRENT_LIST_DIR}/tools/packages.sh ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_tools_packages PROPERTIES LABELS tools TIMEOUT 60)
endif()

# test_tools_snapshot_converter: tools/torch_snapshot_to_trace.py against
# hostile snapshot pickles (tests/tools/test_snapshot_converter.py: standard
# library only, no torch, no pytest).
find_program(AA_PYTHON3_PROGRAM python3)
if(AA_PYTHON3_PROGRAM)
  add_test(NAME test_tools_snapshot_converter
    COMMAND ${AA_PYTHON3_PROGRAM} ${CMAKE_CURRENT_LIST_DIR}/tools/test_snapshot_converter.py)
  set_tests_properties(test_tools_snapshot_converter PROPERTIES LABELS tools TIMEOUT 300)
endif()

# test_tools_export_torch: adaptalloc-replay export --format torch-snapshot
# read back as PyTorch's memory_viz reads it (tests/tools/test_export_torch.py:
# standard library only, no torch).
if(AA_PYTHON3_PROGRAM AND TARGET adaptalloc-replay)
  add_test(NAME test_tools_export_torch
    COMMAND ${AA_PYTHON3_PROGRAM} ${CMAKE_CURRENT_LIST_DIR}/tools/test_export_torch.py
            $<TARGET_FILE:adaptalloc-replay>)
  set_tests_properties(test_tools_export_torch PROPERTIES LABELS tools TIMEOUT 120)
endif()

# test_tools_util_table: bench/replay/util_table.py, issue #36's utilisation
# table from the committed traces (bench/replay/traces/) through this build's
# replay (tests/tools/test_util_table.py: standard library only, no torch).
if(AA_PYTHON3_PROGRAM AND TARGET adaptalloc-replay)
  add_test(NAME test_tools_util_table
    COMMAND ${AA_PYTHON3_PROGRAM} ${CMAKE_CURRENT_LIST_DIR}/tools/test_util_table.py
            $<TARGET_FILE:adaptalloc-replay>)
  set_tests_properties(test_tools_util_table PROPERTIES LABELS tools TIMEOUT 240)
endif()

# test_tools_memory_viz_image_args / _render: tools/memory_viz_image.py --png
# (tests/tools/test_memory_viz_image.py: standard library only, no torch, no
# network). _args: the argument errors, anywhere. _render: a stand-in
# MemoryViz.js rendered offline in headless chromium with the d3@5 of
# tests/browser/node_modules (npm ci --prefix tests/browser); skips (77)
# without chromium or d3. Labelled browser so that the sanitizer runs of
# .ci/run leave it out.
if(AA_PYTHON3_PROGRAM)
  add_test(NAME test_tools_memory_viz_image_args
    COMMAND ${AA_PYTHON3_PROGRAM} ${CMAKE_CURRENT_LIST_DIR}/tools/test_memory_viz_image.py args)
  set_tests_properties(test_tools_memory_viz_image_args PROPERTIES LABELS tools TIMEOUT 120)
  add_test(NAME test_tools_memory_viz_image_render
    COMMAND ${AA_PYTHON3_PROGRAM} ${CMAKE_CURRENT_LIST_DIR}/tools/test_memory_viz_image.py render)
  set_tests_properties(test_tools_memory_viz_image_render PROPERTIES
    LABELS "tools;browser" TIMEOUT 240 SKIP_RETURN_CODE 77)
endif()

# test_tools_files: the files the Python programs read and write, against
# hostile input (tests/tools/test_tool_files.py: standard library only, a
# stand-in Prometheus on 127.0.0.1): python/adaptalloc/_outfile.py, the one
# rule for outputs (never an input, never through a link onto it, checked
# before any work, an exclusive temporary renamed into place) and its bounded
# reads; tools/grafana_preview.py, tools/device/zoo_account.py and
# tools/memory_viz_image.py refusing an output that is an input and every bad
# input in one line with their documented exit code; adaptalloc.torch's OOM
# snapshot never following a planted link.
if(AA_PYTHON3_PROGRAM)
  add_test(NAME test_tools_files
    COMMAND ${AA_PYTHON3_PROGRAM} ${CMAKE_CURRENT_LIST_DIR}/tools/test_tool_files.py)
  set_tests_properties(test_tools_files PROPERTIES LABELS tools TIMEOUT 300)
endif()
