"""What the GPU test files that also run without pytest share
(test_package_torch.py, test_ddp_ranks.py): skipping the same way under
pytest and as a plain script, and the plain script's runner. Not a test file
itself (no test_ prefix)."""
import os
import pathlib
import sys
import tempfile

try:
    import pytest
except ImportError:  # the GPU machine may lack pytest: run_all below
    pytest = None

# The Python the tests start their child processes with.
PY = os.environ.get("ADAPTALLOC_TEST_PYTHON", sys.executable)


class Skip(Exception):
    pass


def skip(reason):
    if pytest is not None:
        pytest.skip(reason)
    raise Skip(reason)


def run_all(tests, label, why, with_tmp=False):
    """Runs every test_* of the `tests` namespace (a module's globals())
    without pytest: one line each, 1 on a failure. `why` not None skips them
    all with that reason; `with_tmp` hands each a fresh temporary folder."""
    if why is not None:
        print("SKIP all: %s: %s" % (label, why))
        return 0
    failed = 0
    for name, fn in sorted(tests.items()):
        if not (name.startswith("test_") and callable(fn)):
            continue
        try:
            if with_tmp:
                with tempfile.TemporaryDirectory() as d:
                    fn(pathlib.Path(d))
            else:
                fn()
            print("PASS", name)
        except Skip as e:
            print("SKIP", name, e)
        except Exception as e:  # AssertionError and the rest
            failed += 1
            print("FAIL", name, "%s: %s" % (type(e).__name__, str(e)[-3000:]))
        sys.stdout.flush()
    return 1 if failed else 0
