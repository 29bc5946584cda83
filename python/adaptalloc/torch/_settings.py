"""adaptalloc.torch, one concern: PyTorch's allocator settings
(PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF,
torch.cuda.memory._set_allocator_settings) under adaptalloc.

parse(text) reads PyTorch's "key:value,key:value" form into Items, each
with what adaptalloc does with it:
  honoured    applied as PyTorch would (per_process_memory_fraction: the
              memory-fraction cap, through the runtime's one settings path)
  translated  applied as the adaptalloc policy setting with that purpose
              (a JSON merge patch of the device pool's policy)
  passed      read by a part of PyTorch that adaptalloc leaves in place
              (the pinned-memory keys: PyTorch's own host allocator)
  ignored     no counterpart; the reason says why
  invalid     not a value PyTorch accepts either
  refused     translated, but the policy in force refused it (the device
              pool's large mode is fixed once the pool is made: a later
              _set_allocator_settings cannot switch it); the reason quotes
              the policy's refusal, and the other keys still apply
report(items, source) is the one line that names each key; plan(items,
device_bytes) the policy patch and the fraction to apply; settle() applies
the patch through a given patch function and marks what it refused. None
needs torch, so the mapping is tested without a GPU (tests/python);
apply() does the rest with torch and the runtime. Nothing here raises for a bad
setting: PyTorch itself refuses those where it reads them.
"""
import re

HONOURED, TRANSLATED, PASSED, IGNORED, INVALID, REFUSED = (
    "honoured", "translated", "passed", "ignored", "invalid", "refused")

_BOOL = {"true": True, "false": False, "1": True, "0": False}

_PINNED = ("pinned_use_cuda_host_register", "pinned_use_host_register",
           "pinned_num_register_threads", "pinned_use_background_threads",
           "pinned_reserve_segment_size_mb")


class Item(object):
    """One key of the settings: key, value (text), status, why, and the
    parsed number or flag (num) where there is one."""

    __slots__ = ("key", "value", "status", "why", "num")

    def __init__(self, key, value, status, why, num=None):
        self.key, self.value, self.status, self.why, self.num = key, value, status, why, num

    def __repr__(self):
        return "Item(%r, %r, %r)" % (self.key, self.value, self.status)


def _split(text):
    """key:value pairs, commas outside brackets separating them."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


def _number(value, kind):
    try:
        return kind(value)
    except (TypeError, ValueError):
        return None


def _item(key, value):
    k = key.strip()
    v = value.strip()
    lk = k.lower()
    if lk == "per_process_memory_fraction":
        f = _number(v, float)
        if f is None or not 0.0 <= f <= 1.0:
            return Item(k, v, INVALID, "a fraction in [0, 1]")
        return Item(k, v, HONOURED, "the memory-fraction cap of every device "
                    "(set_per_process_memory_fraction)", f)
    if lk == "expandable_segments":
        b = _BOOL.get(v.lower())
        if b is None:
            return Item(k, v, INVALID, "True or False")
        return Item(k, v, TRANSLATED, "pools.device.large.mode=%s"
                    % ("expandable" if b else "cache"), b)
    if lk == "max_split_size_mb":
        n = _number(v, int)
        if n is None or n <= 0:
            return Item(k, v, INVALID, "a positive number of MiB")
        return Item(k, v, IGNORED, "no split limit in adaptalloc: it guards PyTorch's cached "
                    "segments against splinters; adaptalloc's expandable path maps pages per "
                    "request and unmaps free ones, and stitches holes' pages into new ranges",
                    n)
    if lk == "garbage_collection_threshold":
        t = _number(v, float)
        if t is None or not 0.0 < t < 1.0:
            return Item(k, v, INVALID, "a fraction in (0, 1)")
        return Item(k, v, TRANSLATED, "adapt.trim_threshold_bytes=(1-%g) x the device's "
                    "allowed memory: the loop trims cached memory beyond it" % t, t)
    if lk == "roundup_power2_divisions":
        n = _number(v, int)
        if n is None:
            if v.startswith("["):
                return Item(k, v, IGNORED, "per-size divisions: adaptalloc's class ladder has "
                            "one density (pools.device.classes.per_doubling); give one number")
            return Item(k, v, INVALID, "a power of two, or a [size:divisions,...] list")
        if n < 1 or n & (n - 1):
            return Item(k, v, INVALID, "a power of two")
        return Item(k, v, TRANSLATED, "pools.device.classes.per_doubling=%d (the small "
                    "classes' ladder; large blocks are page multiples)" % min(n, 16), n)
    if lk in _PINNED:
        return Item(k, v, PASSED, "PyTorch's own pinned-memory allocator reads it "
                    "(adaptalloc's pinned pool, serve_pinned(), has no such setting)")
    if lk == "backend":
        return Item(k, v, IGNORED, "adaptalloc is the CUDA allocator (native, cudaMallocAsync "
                    "are PyTorch's own)")
    if lk == "release_lock_on_cudamalloc":
        return Item(k, v, IGNORED, "adaptalloc never holds a lock over a cudaMalloc of "
                    "another thread's request")
    if lk == "graph_capture_record_stream_reuse":
        return Item(k, v, IGNORED, "adaptalloc's private pools reuse a capture's blocks by "
                    "their own stream rule")
    if lk in ("expandable_segments_handle_type", "max_non_split_rounding_mb"):
        return Item(k, v, IGNORED, "no counterpart (adaptalloc exports POSIX descriptors; "
                    "large blocks are page multiples)")
    return Item(k, v, IGNORED, "not a key adaptalloc knows")


def parse(text):
    """The Items of a settings string, in order (a key given twice: the
    last wins, as in PyTorch; both are listed)."""
    items = []
    for part in _split(text or ""):
        key, sep, value = part.partition(":")
        if not sep or not key.strip():
            items.append(Item(part, "", INVALID, "not key:value"))
            continue
        items.append(_item(key, value))
    return items


def report(items, source):
    """The one line naming each key and what adaptalloc does with it."""
    if not items:
        return "adaptalloc: %s: no settings" % source
    parts = ["%s:%s %s (%s)" % (i.key, i.value, i.status, i.why) for i in items]
    return "adaptalloc: %s: %s" % (source, "; ".join(parts))


def plan(items, allowed_bytes=None):
    """(patch, fraction): the policy merge patch of the translated keys and
    the fraction cap to set (None: none). allowed_bytes is the device's
    memory under the cap (for garbage_collection_threshold; None: that key
    is left out of the patch)."""
    device, adapt, fraction = {}, {}, None
    last = {}
    for i in items:
        if i.status in (HONOURED, TRANSLATED):
            last[i.key.lower()] = i
    if "per_process_memory_fraction" in last:
        fraction = last["per_process_memory_fraction"].num
    if "expandable_segments" in last:
        device.setdefault("large", {})["mode"] = (
            "expandable" if last["expandable_segments"].num else "cache")
    if "roundup_power2_divisions" in last:
        device["classes"] = {"per_doubling": min(int(last["roundup_power2_divisions"].num), 16)}
    if "garbage_collection_threshold" in last and allowed_bytes:
        t = last["garbage_collection_threshold"].num
        adapt["trim_threshold_bytes"] = max(1, int((1.0 - t) * allowed_bytes))
    patch = {}
    if device:
        patch["pools"] = {"device": device}
    if adapt:
        patch["adapt"] = adapt
    return patch, fraction


def settle(items, allowed_bytes, patch_policy):
    """Applies plan(items, allowed_bytes)'s policy patch through
    patch_policy (adaptalloc.patch_policy, or a test's). A policy refuses a
    patch whole; when what it refused is the device pool's large mode (fixed
    once the pool is made), the expandable_segments key is marked refused,
    with the policy's words as its reason, and the rest is applied without
    it. Returns (fraction, message): the fraction cap to set (None: none)
    and what to say of a patch refused for another reason (None: applied)."""
    patch, fraction = plan(items, allowed_bytes)
    err = None
    for _ in range(2):
        if not patch:
            return fraction, None
        try:
            patch_policy(patch)
            return fraction, None
        except Exception as e:  # a refused patch changes nothing
            # the policy's words, without patch_policy's own prefix
            err = re.sub(r"^adaptalloc\.\w+: ", "", str(e))
        mode = [i for i in items
                if i.key.lower() == "expandable_segments" and i.status == TRANSLATED]
        if not mode or "large.mode" not in err:
            break
        for i in mode:
            i.status = REFUSED
            i.why = ("%s; give expandable_segments in PYTORCH_CUDA_ALLOC_CONF before the "
                     "first CUDA allocation, or pools.device.large.mode in the policy file"
                     % err.rstrip("."))
        patch, fraction = plan(items, allowed_bytes)
    return fraction, "the policy refused %r (%s); nothing of it changed" % (patch, err)


def _env():
    """(source, text) of the settings in the environment, PyTorch's order:
    PYTORCH_CUDA_ALLOC_CONF wins over PYTORCH_ALLOC_CONF."""
    import os
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        v = os.environ.get(name)
        if v:
            return name, v
    return None, None


def apply(torch, text, source, log=None):
    """Applies a settings string under adaptalloc and writes the report
    line (to stderr unless log is given). Returns the Items."""
    import sys
    import adaptalloc
    items = parse(text)
    allowed = None
    try:
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = plan(items, None)[1]
        allowed = int(total * (fraction if fraction is not None else
                               torch.cuda.get_per_process_memory_fraction(0)))
    except Exception:  # no device properties: the threshold is left out
        pass
    fraction, refused = settle(items, allowed, adaptalloc.patch_policy)
    msgs = [report(items, source)]
    if refused:
        msgs.append("adaptalloc: %s: %s" % (source, refused))
    if fraction is not None:
        for d in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(fraction, d)
    for m in msgs:
        (log or (lambda s: sys.stderr.write(s + "\n")))(m)
    return items


_wrapped = [False]


def install_hooks(torch, log=None):
    """At install(): the environment's settings (one line), and
    torch.cuda.memory._set_allocator_settings wrapped so that each later
    call is applied and reported the same way (PyTorch's own parser still
    runs first: it refuses what it refuses, and its pinned keys reach its
    host allocator)."""
    source, text = _env()
    if text:
        apply(torch, text, source, log)
    if _wrapped[0]:
        return
    mem = torch.cuda.memory
    orig = getattr(mem, "_set_allocator_settings", None)
    if orig is None:
        return

    def _set_allocator_settings(env):
        orig(env)
        apply(torch, env, "_set_allocator_settings", log)

    _set_allocator_settings.__doc__ = orig.__doc__
    _set_allocator_settings.__wrapped__ = orig
    mem._set_allocator_settings = _set_allocator_settings
    _wrapped[0] = True
