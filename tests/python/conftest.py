"""Fixtures for the package tests: a Python with adaptalloc installed and a
helper that runs code in a fresh process of it (the runtime is one per
process, so each scenario gets its own).

ADAPTALLOC_TEST_PYTHON=/path/to/python uses a Python that already has the
package (e.g. one with torch); otherwise the package is installed, offline,
into a fresh virtual environment (python3 -m venv --system-site-packages,
pip install --no-build-isolation --no-index <repo>) once per session.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _install_venv(tmp):
    venv = os.path.join(tmp, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    t0 = time.monotonic()
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-deps", "--disable-pip-version-check", "-q", ROOT],
                       cwd=tmp, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("pip install of the package failed:\n%s\n%s" % (r.stdout[-4000:],
                                                                  r.stderr[-4000:]))
    print("adaptalloc: pip install took %.1f s" % (time.monotonic() - t0))
    return py


@pytest.fixture(scope="session")
def aa_python(tmp_path_factory):
    py = os.environ.get("ADAPTALLOC_TEST_PYTHON")
    if py:
        return py
    return _install_venv(str(tmp_path_factory.mktemp("pkg")))


class Result:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self):
        """The last line of stdout as JSON."""
        lines = [l for l in self.out.splitlines() if l.strip()]
        assert lines, "no output; stderr:\n" + self.err
        return json.loads(lines[-1])


@pytest.fixture
def run_py(aa_python, tmp_path):
    """run_py(code, env=None, args=(), timeout=120) -> Result. Runs in
    tmp_path (no ./policies there) with the store off, the server on a free
    loopback port and the runtime quiet, unless env says otherwise."""

    def run(code, env=None, args=(), timeout=120, cwd=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTALLOC_")}
        e.update({"ADAPTALLOC_DB": "off", "ADAPTALLOC_HTTP": "127.0.0.1:0",
                  "ADAPTALLOC_QUIET": "1"})
        e.pop("PYTHONPATH", None)
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        proc = subprocess.run([aa_python, "-c", textwrap.dedent(code)] + list(args),
                              cwd=cwd or str(tmp_path), env=e, capture_output=True,
                              text=True, timeout=timeout)
        return Result(proc)

    return run
