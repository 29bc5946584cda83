"""A stand-in for the adaptalloc package beside the fake torch
(faketorch/torch): install() and the device pool's limit in stats(), for
bench/gpu/bench_maxbatch.py's native mode without a GPU."""


def stats():
    import torch

    return {"pools": [{"name": "device0", "backend": "cuda", "limit_bytes": torch._s.cap or 0},
                      {"name": "pinned", "backend": "cuda_host", "limit_bytes": 0}]}
