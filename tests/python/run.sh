#!/usr/bin/env bash
# tests/python/run.sh — the torch-free tests of the Python package: installs
# it offline into a fresh virtual environment (pip install
# --no-build-isolation --no-index .) and runs tests/python with pytest.
# Registered as the ctest test_python_package (tests/python.cmake).
#
# Needs a Python with venv, pip, setuptools, wheel, pytest and its headers
# (Debian: python3-venv python3-setuptools python3-wheel python3-pytest
# python3-dev). Exits 77 (ctest: skipped) naming what is missing.
#   AA_PYTHON=/path/to/python3   use that interpreter (default /usr/bin/python3,
#                                else python3 on PATH)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${AA_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; else py=$(command -v python3 || true); fi
fi
if [ -z "$py" ]; then
  echo "test_python_package: SKIP: no python3" >&2
  exit 77
fi
missing=$("$py" - <<'PY'
import importlib.util, sysconfig, os
need = {"venv": "python3-venv", "ensurepip": "python3-venv", "setuptools": "python3-setuptools",
        "wheel": "python3-wheel", "pytest": "python3-pytest"}
miss = [pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None]
if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
    miss.append("python3-dev")
print(" ".join(sorted(set(miss))))
PY
)
if [ -n "$missing" ]; then
  echo "test_python_package: SKIP: $py lacks: $missing (Debian packages)" >&2
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -q -p no:cacheprovider "$here" "$@"
