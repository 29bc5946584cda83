"""PyTorch's allocator settings under adaptalloc, without torch or a GPU:
python/adaptalloc/torch/_settings.py's parse, the one report line and the
policy patch each key becomes (docs/torch.md, "PyTorch's allocator
settings")."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "aa_settings", os.path.join(ROOT, "python", "adaptalloc", "torch", "_settings.py"))
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)


def test_each_key_has_a_status_and_a_reason():
    items = S.parse("max_split_size_mb:128, expandable_segments:True,"
                    "garbage_collection_threshold:0.6,roundup_power2_divisions:4,"
                    "per_process_memory_fraction:0.25,pinned_use_cuda_host_register:True,"
                    "backend:cudaMallocAsync,nonsense:3")
    got = {i.key: i.status for i in items}
    assert got == {"max_split_size_mb": "ignored", "expandable_segments": "translated",
                   "garbage_collection_threshold": "translated",
                   "roundup_power2_divisions": "translated",
                   "per_process_memory_fraction": "honoured",
                   "pinned_use_cuda_host_register": "passed", "backend": "ignored",
                   "nonsense": "ignored"}
    assert all(i.why for i in items)


def test_report_is_one_line_naming_every_key():
    items = S.parse("expandable_segments:False,max_split_size_mb:64")
    line = S.report(items, "PYTORCH_CUDA_ALLOC_CONF")
    assert "\n" not in line
    assert line.startswith("adaptalloc: PYTORCH_CUDA_ALLOC_CONF: ")
    assert "expandable_segments:False translated" in line
    assert "max_split_size_mb:64 ignored" in line
    assert S.report([], "X") == "adaptalloc: X: no settings"


def test_plan_is_the_policy_patch_and_the_fraction():
    items = S.parse("expandable_segments:False,garbage_collection_threshold:0.75,"
                    "roundup_power2_divisions:8,per_process_memory_fraction:0.5")
    patch, frac = S.plan(items, 1000)
    assert frac == 0.5
    assert patch == {"pools": {"device": {"large": {"mode": "cache"}, "classes":
                                          {"per_doubling": 8}}},
                     "adapt": {"trim_threshold_bytes": 250}}
    # without the device's memory the threshold is left out
    assert "adapt" not in S.plan(items, None)[0]
    # the last of a repeated key wins, as in PyTorch
    assert S.plan(S.parse("expandable_segments:True,expandable_segments:False"))[0] == \
        {"pools": {"device": {"large": {"mode": "cache"}}}}


def test_bad_values_are_invalid_not_errors():
    for text in ("per_process_memory_fraction:2", "expandable_segments:maybe",
                 "max_split_size_mb:-1", "garbage_collection_threshold:1.5",
                 "roundup_power2_divisions:3", "justakey", ":5"):
        items = S.parse(text)
        assert [i.status for i in items] == ["invalid"], (text, items)
        assert S.plan(items, 1 << 30) == ({}, None)


def test_bracketed_lists_keep_their_commas():
    items = S.parse("roundup_power2_divisions:[256:1,512:2,>:4],max_split_size_mb:32")
    assert [i.key for i in items] == ["roundup_power2_divisions", "max_split_size_mb"]
    assert items[0].status == "ignored" and "one number" in items[0].why
    assert S.parse("") == [] and S.parse(None) == []


def test_settle_marks_a_refused_mode_and_applies_the_rest():
    """_set_allocator_settings on a live device pool: its large mode is
    fixed, so the policy refuses a patch with it; the key is then marked
    refused with the policy's words, and the other keys are applied."""
    seen = []

    def patch_policy(patch):
        seen.append(patch)
        if "large" in patch.get("pools", {}).get("device", {}):
            raise ValueError("adaptalloc.patch_policy: pools.device: large.mode is fixed "
                             "while pool device0 is live "
                             "(\"cache\" in force, \"expandable\" asked); restart to change it")

    items = S.parse("expandable_segments:True,roundup_power2_divisions:4")
    fraction, msg = S.settle(items, None, patch_policy)
    assert fraction is None and msg is None
    assert seen == [{"pools": {"device": {"large": {"mode": "expandable"},
                                          "classes": {"per_doubling": 4}}}},
                    {"pools": {"device": {"classes": {"per_doubling": 4}}}}]
    mode = items[0]
    assert mode.status == "refused" and "large.mode is fixed" in mode.why
    assert "PYTORCH_CUDA_ALLOC_CONF" in mode.why
    line = S.report(items, "_set_allocator_settings")
    assert "expandable_segments:True refused (pools.device: large.mode is fixed" in line
    assert "roundup_power2_divisions:4 translated" in line


def test_settle_reports_a_patch_refused_for_another_reason():
    def patch_policy(patch):
        raise ValueError("adapt.trim_threshold_bytes: out of range")

    items = S.parse("garbage_collection_threshold:0.5,per_process_memory_fraction:0.5")
    fraction, msg = S.settle(items, 1 << 30, patch_policy)
    assert fraction == 0.5
    assert msg.startswith("the policy refused {'adapt': {'trim_threshold_bytes': ")
    assert "out of range" in msg and "nothing of it changed" in msg
    assert items[0].status == "translated"  # not a fixed setting: nothing marked


def test_settle_applies_an_accepted_patch_once():
    seen = []
    items = S.parse("expandable_segments:False")
    assert S.settle(items, None, seen.append) == (None, None)
    assert seen == [{"pools": {"device": {"large": {"mode": "cache"}}}}]
    assert S.settle(S.parse("max_split_size_mb:64"), None, seen.append) == (None, None)
    assert len(seen) == 1  # nothing to patch: not called
