"""python -m adaptalloc.torch [options] script.py ARGS — see adaptalloc._launch."""
import sys

from adaptalloc import _launch


def _install(**keywords):
    try:
        from adaptalloc import torch as aa_torch
        aa_torch.install(**keywords)
    except ImportError as e:  # no torch; install() runs no user code
        raise _launch.InstallError(str(e)) from None


if __name__ == "__main__":
    sys.exit(_launch.main(sys.argv[1:], _install))
