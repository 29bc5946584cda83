"""python -m adaptalloc.torch [options] script.py ARGS — see adaptalloc._launch."""
import sys

from adaptalloc import _launch


def _install(**keywords):
    try:
        from adaptalloc import torch as aa_torch
        torch = aa_torch._need_torch("install")
    except ImportError as e:  # no torch; install() runs no user code
        raise _launch.InstallError(str(e)) from None
    why = aa_torch._cuda_missing(torch)  # no GPU: the script runs on torch's allocator
    if why is not None:
        raise _launch.NoDevice(why)
    aa_torch.install(**keywords)


if __name__ == "__main__":
    sys.exit(_launch.main(sys.argv[1:], _install))
