#!/bin/bash
# tools/device/package-test.sh — runs ON a CUDA machine with torch and no
# package index: installs the Python package offline (the libraries the C
# build needs come from the .deb files in .deps/, unpacked into a private
# prefix as setup.sh does), then runs the package's GPU tests
# (tests/gpu/test_package_torch.py) and its torch-free tests (tests/python)
# with that installation.
#
# Usage (repository root): tools/device/package-test.sh [pytest args...]
#   AA_PKG_BENCH=1   then also bench/gpu/bench_py_pinned.py (BENCHMARKS.md
#                    "Pinned memory from Python"), JSON in $OUT/py_pinned.json
#   AA_PKG_TESTS=0   install only (with AA_PKG_BENCH=1: install and benchmark)
# Output: $OUT/package-log.txt (without $OUT: ./gpu-out/).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
prefix=${AA_DEPS_PREFIX:-/tmp/aa-deps}
py=${AA_PYTHON:-python3}
venv=/tmp/aa-pkg-venv
{
  if ls .deps/*.deb >/dev/null 2>&1; then
    mkdir -p "$prefix"
    for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
    libdir="$prefix/usr/lib/x86_64-linux-gnu"
    export ADAPTALLOC_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$prefix/usr -DCMAKE_LIBRARY_PATH=$libdir ${ADAPTALLOC_CMAKE_ARGS:-}"
  fi
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  # An interpreter that is itself a virtual environment (torch installed in
  # it) takes the package directly: a venv made from it would not see torch.
  t0=$SECONDS
  if "$py" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)'; then
    vpy=$py
  else
    rm -rf "$venv"
    "$py" -m venv --system-site-packages "$venv" && vpy=$venv/bin/python || vpy=$py
    "$vpy" -c 'import torch' 2>/dev/null || vpy=$py   # torch in a user site: no venv
  fi
  pipi=("$vpy" -m pip install --no-build-isolation --no-index --no-deps -v .)
  "${pipi[@]}" >"$out/pip.log" 2>&1 || "${pipi[@]}" --break-system-packages >"$out/pip.log" 2>&1
  rc=$?
  echo "package-test: pip install rc=$rc in $((SECONDS - t0)) s ($vpy)"
  tail -3 "$out/pip.log"
  grep -iE "warning|error|adaptalloc:" "$out/pip.log" | grep -v "byte-compil" | head -40
  (cd /tmp && "$vpy" -c 'import adaptalloc, adaptalloc.torch as t; print(adaptalloc.__file__, "native:", t.native_available(), "pluggable:", t.pluggable_library())')
  export ADAPTALLOC_TEST_PYTHON=$vpy
  if [ "${AA_PKG_TESTS:-1}" = 0 ]; then
    echo "package-test: tests skipped (AA_PKG_TESTS=0)"
  elif "$vpy" -c 'import pytest' 2>/dev/null; then
    "$vpy" -m pytest -p no:cacheprovider -rs -v tests/gpu/test_package_torch.py tests/python "$@"
  else
    echo "package-test: no pytest here; the GPU tests' own runner (tests/python needs pytest)"
    "$vpy" tests/gpu/test_package_torch.py
  fi
  echo "package-test: tests rc=$?"
  if [ "${AA_PKG_BENCH:-0}" = 1 ]; then
    (cd /tmp && "$vpy" "$root/bench/gpu/bench_py_pinned.py" --reps "${AA_PKG_BENCH_REPS:-5}" \
      --json "$out/py_pinned.json" --only "${AA_PKG_BENCH_ONLY:-alloc,pack,loader}")
    echo "package-test: bench rc=$?"
  fi
} 2>&1 | tee "$out/package-log.txt"
