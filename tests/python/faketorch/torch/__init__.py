"""A stand-in for torch with just what bench/gpu/bench_maxbatch.py's child
uses for its `smoke` workload, so its harness (cap, probes after an OOM,
peaks, RESULT lines, the table) runs without torch or a GPU
(tests/python/test_bench_harness.py). A device of 80 GiB with a 500 MiB
context; the cap from set_per_process_memory_fraction is checked against
reserved bytes as PyTorch's allocator does; freed memory stays reserved until
empty_cache(). Nothing here resembles torch's numerics."""
import os

__version__ = "0.0-fake"
uint8 = "uint8"
_TOTAL = 80 << 30
_CONTEXT = 500 << 20


class OutOfMemoryError(RuntimeError):
    pass


class _State:
    allocated = 0
    reserved = 0
    peak_allocated = 0
    peak_reserved = 0
    cap = None


_s = _State()


class _Tensor:
    def __init__(self, n):
        need = _s.allocated + n
        if need > _s.reserved:
            if _s.cap is not None and need > _s.cap:
                raise OutOfMemoryError("fake: tried to allocate %d bytes over the cap" % n)
            _s.reserved = need
        _s.allocated = need
        self.n = n
        _s.peak_allocated = max(_s.peak_allocated, _s.allocated)
        _s.peak_reserved = max(_s.peak_reserved, _s.reserved)

    def __del__(self):
        _s.allocated -= self.n


def empty(n, dtype=None, device=None):
    return _Tensor(int(n))


def device(name):
    return name


def manual_seed(seed):
    return None


class _Cuda:
    OutOfMemoryError = OutOfMemoryError

    @staticmethod
    def init():
        if os.environ.get("FAKETORCH_FAIL_INIT"):
            raise RuntimeError("fake: no CUDA")

    @staticmethod
    def synchronize():
        if os.environ.get("FAKETORCH_SLEEP"):  # a slow step: for the budget's test
            import time

            time.sleep(float(os.environ["FAKETORCH_SLEEP"]))

    @staticmethod
    def mem_get_info():
        return _TOTAL - _CONTEXT - _s.reserved, _TOTAL

    @staticmethod
    def set_per_process_memory_fraction(fraction, device=None):
        if not 0 <= fraction <= 1:
            raise ValueError("fraction")
        _s.cap = int(fraction * _TOTAL)

    @staticmethod
    def get_device_name(i=0):
        return "fake"

    @staticmethod
    def memory_allocated():
        return _s.allocated

    @staticmethod
    def memory_reserved():
        return _s.reserved

    @staticmethod
    def max_memory_allocated():
        return _s.peak_allocated

    @staticmethod
    def max_memory_reserved():
        return _s.peak_reserved

    @staticmethod
    def reset_peak_memory_stats():
        _s.peak_allocated, _s.peak_reserved = _s.allocated, _s.reserved

    @staticmethod
    def empty_cache():
        _s.reserved = _s.allocated


cuda = _Cuda()
