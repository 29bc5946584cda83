"""The adaptalloc Python package without torch or a GPU: install, import,
stats, policy round trips, errors, the environment mapping and the launcher.
Each scenario runs in a fresh process (run_py) because the runtime is one
per process."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_installs_into_a_fresh_venv_and_imports(run_py):
    r = run_py("""
        import json, os, adaptalloc, adaptalloc.torch
        pkg = os.path.dirname(adaptalloc.__file__)
        print(json.dumps({"file": adaptalloc.__file__, "version": adaptalloc.__version__,
                          "files": sorted(os.listdir(pkg)),
                          "policies": sorted(os.listdir(adaptalloc.policy_dir())),
                          "started": adaptalloc.started()}))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert not d["file"].startswith(root + os.sep), "imported from the source tree"
    assert d["version"] == "0.1.0"
    assert "libadaptalloc.so.0" in d["files"]
    assert any(f.startswith("_C.") and f.endswith(".so") for f in d["files"])
    assert "default.json" in d["policies"] and "schema.json" in d["policies"]
    assert d["started"] is False, "importing must not start the runtime"


def test_stats_json_has_the_pool_fields(run_py):
    r = run_py("""
        import json, adaptalloc
        b = adaptalloc.Block("host", 10000)
        mv = memoryview(b); mv[:5] = b"hello"; assert bytes(mv[:5]) == b"hello"
        during = adaptalloc.stats()
        del mv, b
        after = adaptalloc.stats()
        print(json.dumps({"during": during, "after": after}))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    for key in ("model", "pid", "policy_version", "pools", "adapt", "store"):
        assert key in d["during"], key
    pools = {p["name"]: p for p in d["during"]["pools"]}
    host = pools["host"]
    for key in ("bytes_in_use", "bytes_reserved", "peak_bytes_in_use", "peak_bytes_reserved",
                "allocs", "frees", "limit_bytes", "backend"):
        assert key in host, key
    assert host["bytes_in_use"] >= 10000
    assert host["bytes_reserved"] >= host["bytes_in_use"]
    assert host["allocs"] == 1 and host["frees"] == 0
    after = {p["name"]: p for p in d["after"]["pools"]}["host"]
    assert after["bytes_in_use"] == 0 and after["frees"] == 1


def test_policy_get_set_round_trip(run_py):
    r = run_py("""
        import json, adaptalloc
        p0 = adaptalloc.policy(); v0 = adaptalloc.policy_version()
        p0["adapt"]["interval_ms"] = 1234
        v1 = adaptalloc.set_policy(p0)
        p1 = adaptalloc.policy()
        v2 = adaptalloc.patch_policy({"adapt": {"interval_ms": 4321}}, if_match=v1)
        p2 = adaptalloc.policy()
        v3 = adaptalloc.patch_policy('{"adapt": {"interval_ms": 777}}')
        print(json.dumps({"v": [v0, v1, v2, v3, adaptalloc.policy_version()],
                          "i": [p1["adapt"]["interval_ms"], p2["adapt"]["interval_ms"],
                                adaptalloc.policy()["adapt"]["interval_ms"]],
                          "stats_version": adaptalloc.stats()["policy_version"]}))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["v"] == [1, 2, 3, 4, 4]
    assert d["i"] == [1234, 4321, 777]
    assert d["stats_version"] == 4


def test_a_setting_that_cannot_change_live_is_refused(run_py):
    # issue 35: a setting fixed while its pool lives, or tracing without a
    # store (ADAPTALLOC_DB=off here), is refused naming it (HTTP 409), never
    # reported as a change
    r = run_py("""
        import json, adaptalloc
        b = adaptalloc.Block("host", 4096)  # the host pool is live
        v = adaptalloc.policy_version()
        out = {}
        for name, patch in (("slab", {"pools": {"host": {"slab_size": 4194304}}}),
                            ("trace", {"telemetry": {"trace": True}})):
            try:
                adaptalloc.patch_policy(patch)
                out[name] = None
            except adaptalloc.PolicyError as e:
                out[name] = str(e)
        out["same"] = adaptalloc.policy_version() == v
        print(json.dumps(out))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["slab"] is not None and "slab_size is fixed" in d["slab"], d
    assert d["trace"] is not None and "telemetry.trace" in d["trace"], d
    assert d["same"] is True


def test_bad_input_raises_a_clear_error_and_changes_nothing(run_py):
    r = run_py("""
        import json, adaptalloc
        before = adaptalloc.policy(); v = adaptalloc.policy_version()
        out = {}
        def trap(name, fn):
            try:
                fn()
                out[name] = None
            except Exception as e:
                out[name] = [type(e).__name__, str(e),
                             [c.__name__ for c in type(e).__mro__]]
        trap("int_doc", lambda: adaptalloc.set_policy(42))
        trap("broken_json", lambda: adaptalloc.set_policy("{"))
        trap("negative", lambda: adaptalloc.patch_policy({"adapt": {"interval_ms": -5}}))
        trap("stale", lambda: adaptalloc.patch_policy({"adapt": {"interval_ms": 900}}, if_match=99))
        trap("if_match_type", lambda: adaptalloc.patch_policy({}, if_match="1"))
        trap("nul", lambda: adaptalloc.set_policy('{"name": "a\\u0000"}' + "\\0"))
        trap("incomplete", lambda: adaptalloc.set_policy({"version": 1}))
        trap("block_kind", lambda: adaptalloc.Block("gpu", 10))
        trap("block_size", lambda: adaptalloc.Block("host", 0))
        trap("block_stream", lambda: adaptalloc.Block("host", 8, "s"))
        trap("configure_type", lambda: adaptalloc.configure(model=3))
        trap("configure_key", lambda: adaptalloc.configure(bogus=1))
        trap("configure_http", lambda: adaptalloc.configure(http="nocolon"))
        trap("configure_trace", lambda: adaptalloc.configure(trace=1.0))
        trap("not_utf8", lambda: adaptalloc.patch_policy(b"\\xff{}"))
        trap("stream_negative", lambda: adaptalloc.Block("host", 8, -1))
        trap("stream_huge", lambda: adaptalloc.Block("host", 8, 1 << 70))
        import adaptalloc.torch
        trap("install_native", lambda: adaptalloc.torch.install(native="yes"))
        trap("install_record", lambda: adaptalloc.torch.install(record_stream=None))
        out["same"] = adaptalloc.policy() == before and adaptalloc.policy_version() == v
        print(json.dumps(out))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["same"] is True
    name, msg, mro = d["int_doc"]
    assert name == "TypeError" and "dict or a JSON string" in msg and "int" in msg
    for key in ("broken_json", "negative"):
        name, msg, mro = d[key]
        assert name == "PolicyError" and "ValueError" in mro, d[key]
    assert "interval_ms" in d["negative"][1] and "negative" in d["negative"][1]
    assert d["stale"][0] == "PolicyConflict" and "99" in d["stale"][1]
    assert d["if_match_type"][0] == "TypeError" and "if_match" in d["if_match_type"][1]
    assert d["nul"][0] == "PolicyError" and "NUL" in d["nul"][1]
    assert d["incomplete"][0] == "PolicyError", d["incomplete"]
    assert d["incomplete"][1] == ("adaptalloc.set_policy: not a complete policy: missing "
                                  "pools.device, pools.pinned, pools.host, adapt, telemetry "
                                  "(use patch_policy to change part)"), d["incomplete"]
    assert d["block_kind"][0] == "ValueError" and "'gpu'" in d["block_kind"][1]
    assert d["block_size"][0] == "ValueError" and "> 0" in d["block_size"][1]
    assert d["block_stream"][0] == "TypeError" and "stream" in d["block_stream"][1]
    assert d["configure_type"][0] == "TypeError" and "model=" in d["configure_type"][1]
    assert d["configure_key"][0] == "TypeError" and "bogus" in d["configure_key"][1]
    assert d["configure_http"][0] == "ValueError" and "HOST:PORT" in d["configure_http"][1]
    assert d["configure_trace"][0] == "TypeError" and "trace=" in d["configure_trace"][1]
    assert d["not_utf8"][0] == "PolicyError" and "UTF-8" in d["not_utf8"][1]
    for key in ("stream_negative", "stream_huge"):
        name, msg, mro = d[key]
        assert name == "ValueError" and "adaptalloc" in msg and "stream" in msg, d[key]
    # checked before torch is needed, so these hold without torch too
    assert d["install_native"][0] == "TypeError" and "native" in d["install_native"][1]
    assert d["install_record"][0] == "TypeError" and "record_stream" in d["install_record"][1]


def test_keywords_configure_the_runtime_through_a_c_call(run_py, tmp_path):
    pdir = tmp_path / "mypolicies"
    pdir.mkdir()
    src = os.path.join(os.path.dirname(__file__), "..", "..", "policies", "default.json")
    doc = json.load(open(src))
    doc["name"] = "from-my-dir"
    (pdir / "mine.json").write_text(json.dumps(doc))
    db = tmp_path / "run.db"
    r = run_py("""
        import json, os, adaptalloc
        set_ = adaptalloc.configure(model="mine", policy_dir=sys_argv[1], db=sys_argv[2],
                                    http=False, trace=True)
        env = {k: os.environ.get(k) for k in adaptalloc.ENV.values()}
        os.environ["ADAPTALLOC_MODEL"] = "set-after-configure"  # configure() took its copy
        adaptalloc.start()
        s = adaptalloc.stats()
        out = {"set": set_, "env": env, "model": s["model"],
               "policy": adaptalloc.policy()["name"], "source": s["policy_source"],
               "http": adaptalloc.http_address(), "run_id": adaptalloc.run_id(),
               "store": s["store"]}
        try:
            adaptalloc.configure(model="other")
            out["late"] = None
        except adaptalloc.AdaptallocError as e:
            out["late"] = str(e)
        out["same_ok"] = adaptalloc.configure(model="mine")
        print(json.dumps(out))
    """.replace("sys_argv", "__import__('sys').argv"), args=(str(pdir), str(db)),
        env={"ADAPTALLOC_HTTP": None, "ADAPTALLOC_DB": None, "ADAPTALLOC_MODEL": None,
             "ADAPTALLOC_TRACE": None, "ADAPTALLOC_POLICY_DIR": None})
    assert r.rc == 0, r.err
    d = r.json()
    # the settings went to the runtime through _C.configure, not the environment
    assert d["set"] == {"ADAPTALLOC_MODEL": "mine", "ADAPTALLOC_HTTP": "off",
                        "ADAPTALLOC_DB": str(db), "ADAPTALLOC_TRACE": "1",
                        "ADAPTALLOC_POLICY_DIR": str(tmp_path / "mypolicies")}
    for name in ("ADAPTALLOC_MODEL", "ADAPTALLOC_HTTP", "ADAPTALLOC_DB", "ADAPTALLOC_TRACE",
                 "ADAPTALLOC_POLICY_DIR"):
        assert d["env"][name] is None, name
    assert d["model"] == "mine"
    assert d["policy"] == "from-my-dir" and d["source"] == "file"
    assert d["http"] is None
    assert d["run_id"] > 0 and os.path.exists(db)
    assert "ADAPTALLOC_MODEL" in d["late"] and "already started" in d["late"]
    assert d["same_ok"] == {}


def test_the_environment_still_configures_and_keywords_win(run_py, tmp_path):
    # A user's ADAPTALLOC_* variables are the base; a keyword replaces one of
    # them, the others stay; the ranks come from RANK/LOCAL_RANK/WORLD_SIZE.
    db = tmp_path / "r{rank}.db"
    r = run_py("""
        import json, adaptalloc
        adaptalloc.configure(model="from-keyword")
        s = adaptalloc.stats()
        print(json.dumps({"model": s["model"], "store": s["store"], "http": adaptalloc.http_address(),
                          "ranks": [s["rank"], s["local_rank"], s["world_size"]],
                          "run_id": adaptalloc.run_id()}))
    """, env={"ADAPTALLOC_MODEL": "from-env", "ADAPTALLOC_DB": str(db),
              "ADAPTALLOC_HTTP": "off", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert r.rc == 0, r.err
    d = r.json()
    assert d["model"] == "from-keyword"
    assert d["http"] is None
    assert d["ranks"] == [3, 1, 4]
    assert d["run_id"] > 0 and (tmp_path / "r1.db").exists()
    r = run_py("""
        import json, adaptalloc
        s = adaptalloc.stats()
        print(json.dumps({"model": s["model"], "ranks": [s["rank"], s["local_rank"],
                                                          s["world_size"]]}))
    """, env={"ADAPTALLOC_MODEL": "only-env", "ADAPTALLOC_DB": "off", "ADAPTALLOC_HTTP": "off",
              "RANK": None, "LOCAL_RANK": None, "WORLD_SIZE": None})
    assert r.rc == 0, r.err
    assert r.json() == {"model": "only-env", "ranks": [None, None, None]}


def test_the_packaged_policies_are_the_default_policy_dir(run_py):
    r = run_py("""
        import json, os, adaptalloc
        print(json.dumps({"name": adaptalloc.policy()["name"],
                          "source": adaptalloc.stats()["policy_source"],
                          "dir": adaptalloc._configured.get("ADAPTALLOC_POLICY_DIR"),
                          "env": os.environ.get("ADAPTALLOC_POLICY_DIR"),
                          "pkg": adaptalloc.policy_dir()}))
    """, env={"ADAPTALLOC_MODEL": "bert-base", "ADAPTALLOC_POLICY_DIR": None})
    assert r.rc == 0, r.err
    d = r.json()
    assert d["dir"] == d["pkg"]
    assert d["env"] is None
    assert d["source"] == "file"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert d["name"] == json.load(open(os.path.join(root, "policies", "bert-base.json")))["name"]


def test_a_model_without_a_policy_file_is_reported(run_py):
    # model="bert" (no bert.json) used to fall back to the default in silence,
    # even with the runtime not quiet.
    r = run_py("""
        import json, adaptalloc
        adaptalloc.start(model="no-such-model")
        print(json.dumps(adaptalloc.stats()["policy_source"]))
    """, env={"ADAPTALLOC_POLICY_DIR": None})
    assert r.rc == 0, r.err
    assert r.json() == "default"
    assert "no policy for model no-such-model" in r.err, r.err


def test_http_server_serves_what_the_api_reports(run_py):
    r = run_py("""
        import json, urllib.request, adaptalloc
        adaptalloc.start(model="served")
        v = adaptalloc.patch_policy({"adapt": {"interval_ms": 2500}})
        base = adaptalloc.url()
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy
        stats = json.load(direct.open(base + "stats", timeout=10))
        pol = json.load(direct.open(base + "policy", timeout=10))
        print(json.dumps({"port": adaptalloc.http_port(), "addr": adaptalloc.http_address(),
                          "model": stats["model"], "interval": pol["adapt"]["interval_ms"],
                          "v": v}))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["port"] > 0 and d["addr"].endswith(":%d" % d["port"])
    assert d["model"] == "served" and d["interval"] == 2500 and d["v"] == 2


def test_shutdown_refuses_later_calls_clearly(run_py):
    r = run_py("""
        import json, adaptalloc
        b = adaptalloc.Block("host", 100)
        adaptalloc.stats(); adaptalloc.shutdown()
        try:
            adaptalloc.stats(); print(json.dumps(None))
        except RuntimeError as e:
            del b   # must not touch the destroyed pool
            print(json.dumps([str(e), adaptalloc.started()]))
    """)
    assert r.rc == 0, r.err
    msg, started = r.json()
    assert "shut down" in msg and started is False


def test_c_api_for_the_tensor_side(run_py):
    """adaptalloc._C is the one module that binds staging, the packer and the
    runtime: it publishes its C API (python/src/adaptalloc_capi.h) as the
    capsule _C_API for adaptalloc._torch_ext, with _C's rules (no pool after
    shutdown)."""
    r = run_py("""
        import ctypes, json, adaptalloc
        from adaptalloc import _C
        cap = _C._C_API
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        p = get(cap, b"adaptalloc._C._C_API")
        size, version = ctypes.cast(p, ctypes.POINTER(ctypes.c_uint32))[0:2]
        fns = ctypes.cast(p + 8, ctypes.POINTER(ctypes.c_void_p))
        live = ctypes.CFUNCTYPE(ctypes.c_int)(fns[0])
        pinned = ctypes.CFUNCTYPE(ctypes.c_void_p)(fns[1])
        strerror = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int)(fns[7])
        out = {"type": type(cap).__name__, "size": size, "version": version,
               "live_before": live(), "err": strerror(_C.EINVAL).decode()}
        adaptalloc.stats()  # starts the runtime
        out["live_started"] = live()
        adaptalloc.shutdown()
        out["live_after"] = live()
        out["pinned_after"] = pinned()
        print(json.dumps(out))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["type"] == "PyCapsule"
    assert d["version"] == 1 and d["size"] == 8 + 12 * 8
    assert d["live_before"] == 0 and d["live_started"] == 1
    assert d["live_after"] == 0 and d["pinned_after"] is None
    assert d["err"] == "invalid argument"


@pytest.mark.parametrize("ending", ["", "sys.exit(3)"])
def test_a_traced_run_ends_complete_without_shutdown(run_py, tmp_path, ending):
    # A Python program never calls adaptalloc.shutdown() (a PyTorch one
    # cannot): when it returns or calls sys.exit, the runtime ends its run at
    # process exit, after the interpreter's finalisation freed what it held,
    # and every traced event reaches the store.
    import sqlite3
    db = tmp_path / "trace.db"
    r = run_py("""
        import json, sys, adaptalloc
        adaptalloc.start(db=sys.argv[1], trace=True, http=False)
        kept = adaptalloc.Block("host", 4096)   # freed by the finalisation
        for i in range(500):
            b = adaptalloc.Block("host", 256 + i % 7 * 512)
            del b
        print(json.dumps({"run": adaptalloc.run_id()}))
        sys.stdout.flush()
        ENDING
    """.replace("ENDING", ending), args=(str(db),), env={"ADAPTALLOC_DB": None, "ADAPTALLOC_HTTP": None})
    assert r.rc == (3 if ending else 0), r.err
    run = r.json()["run"]
    assert run > 0
    assert "incomplete" not in r.err, r.err
    con = sqlite3.connect(str(db))
    try:
        ended, written, dropped, cut = con.execute(
            "SELECT ended_ms, events_written, events_dropped, trace_cut_seq FROM runs"
            " WHERE id = ?", (run,)).fetchone()
        ops = dict(con.execute("SELECT op, count(*) FROM trace_events WHERE run_id = ?"
                               " GROUP BY op", (run,)).fetchall())
        snaps = con.execute("SELECT count(*) FROM snapshots WHERE run_id = ?",
                            (run,)).fetchone()[0]
    finally:
        con.close()
    assert ended is not None, "the run was not ended"
    assert ops == {"a": 501, "f": 501}, ops
    assert written == 1002 and dropped == 0 and cut is None
    assert snaps >= 1


def test_shutdown_is_refused_while_adaptalloc_is_torchs_allocator(run_py):
    # PyTorch keeps the pools' blocks and keeps calling into them: shutting
    # the runtime down under it would free the pools from under live tensors.
    # Without torch here, adaptalloc.torch's record of the install stands in.
    r = run_py("""
        import json, adaptalloc, adaptalloc.torch
        b = adaptalloc.Block("host", 100)
        adaptalloc.torch._mode = "native"
        try:
            adaptalloc.shutdown(); err = None
        except adaptalloc.AdaptallocError as e:
            err = str(e)
        alive = adaptalloc.started() and len(adaptalloc.stats()["pools"]) > 0
        c = adaptalloc.Block("host", 100)
        print(json.dumps([err, alive, c.capacity > 0]))
    """)
    assert r.rc == 0, r.err
    err, alive, usable = r.json()
    assert err is not None and "PyTorch" in err and "native" in err
    assert alive is True and usable is True


# ---------------------------------------------------------------- launcher

def test_launcher_runs_a_script_as_main_with_its_argv(run_py, tmp_path):
    script = tmp_path / "sub" / "train.py"
    script.parent.mkdir()
    (script.parent / "helper_mod.py").write_text("VALUE = 41\n")
    script.write_text(
        "import sys, json, helper_mod\n"
        "print(json.dumps({'name': __name__, 'argv': sys.argv, 'v': helper_mod.VALUE + 1}))\n"
        "if sys.argv[-1].isdigit():\n    sys.exit(int(sys.argv[-1]))\n")
    r = run_py("""
        import json, sys
        from adaptalloc import _launch
        calls = []
        rc = _launch.main(sys.argv[1:], lambda **kw: calls.append(kw))
        print(json.dumps({"rc": rc, "calls": calls}))
    """, args=("--model", "m1", "--db=off", "--http", "off", "--trace", "--no-native",
               str(script), "--lr", "0.1"))
    assert r.rc == 0, r.err
    lines = [json.loads(l) for l in r.out.splitlines() if l.strip()]
    assert lines[0] == {"name": "__main__", "argv": [str(script), "--lr", "0.1"], "v": 42}
    assert lines[1]["calls"] == [{"model": "m1", "db": "off", "http": "off", "trace": True,
                                  "native": False}]
    # The script's own exit status propagates.
    r = run_py("""
        import sys
        from adaptalloc import _launch
        _launch.main(sys.argv[1:], lambda **kw: None)
    """, args=(str(script), "7"))
    assert r.rc == 7, (r.out, r.err)


def test_launcher_runs_a_module_and_rejects_bad_usage(run_py, tmp_path):
    (tmp_path / "mymain.py").write_text(
        "import sys, json\nif __name__ == '__main__':\n    print(json.dumps(sys.argv))\n")
    r = run_py("""
        import sys
        from adaptalloc import _launch
        sys.exit(_launch.main(sys.argv[1:], lambda **kw: None))
    """, args=("-m", "mymain", "x", "--y"))
    assert r.rc == 0, r.err
    assert r.json()[1:] == ["x", "--y"]
    for args, needle in ((["--bogus", "a.py"], "unknown option --bogus"),
                         (["--model"], "--model needs a value"),
                         (["nonexistent.py"], "nonexistent.py: no such file"),
                         ([], "no script given"),
                         (["-m"], "-m needs a module name")):
        r = run_py("""
            import sys
            from adaptalloc import _launch
            sys.exit(_launch.main(sys.argv[1:], lambda **kw: None))
        """, args=args)
        assert r.rc == 2 and needle in r.err, (args, r.rc, r.err)
    r = run_py("""
        import sys
        from adaptalloc import _launch
        sys.exit(_launch.main(["--help"], lambda **kw: None))
    """)
    assert r.rc == 0 and "python -m adaptalloc.torch" in r.out


def test_launcher_without_torch_says_so(run_py, tmp_path, aa_python):
    probe = run_py("import torch")
    if probe.rc == 0:
        pytest.skip("torch is installed here; tests/gpu covers the launcher with torch")
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    import subprocess
    p = subprocess.run([aa_python, "-m", "adaptalloc.torch", str(script)], cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "needs PyTorch" in p.stderr and "ran" not in p.stdout


def test_launcher_without_a_gpu_runs_the_script_on_torchs_allocator(aa_python, tmp_path):
    """torch without CUDA (a stand-in CPU-only torch): the launcher says so
    in one line and runs the script, unchanged, on PyTorch's allocator;
    --require-gpu or ADAPTALLOC_REQUIRE_GPU=1 make that an error (exit 2,
    the script not run)."""
    import subprocess
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "torch.py").write_text(STANDIN_TORCH_CPU)
    script = tmp_path / "t.py"
    script.write_text("import sys\nprint('ran', sys.argv[1:])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTALLOC_")}
    env.update(PYTHONPATH=str(tmp_path / "standin"), ADAPTALLOC_HTTP="off", ADAPTALLOC_DB="off")

    def launch(*args, **extra):
        return subprocess.run([aa_python, "-m", "adaptalloc.torch", *args],
                              cwd=str(tmp_path), env=dict(env, **extra),
                              capture_output=True, text=True, timeout=60)
    p = launch(str(script), "--x", "1")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout == "ran ['--x', '1']\n", p.stdout
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert "built without CUDA" in lines[0] and "on PyTorch's own allocator" in lines[0], lines
    assert "--require-gpu" in lines[0]
    for p in (launch("--require-gpu", str(script)),
              launch(str(script), ADAPTALLOC_REQUIRE_GPU="1")):
        assert p.returncode == 2 and "ran" not in p.stdout, (p.stdout, p.stderr)
        assert "not running" in p.stderr and "built without CUDA" in p.stderr, p.stderr


FAKE_ENV_TORCH = {
    "torch/__init__.py": '''"""A stand-in for a CUDA build of torch, installed in a virtual
environment, with the C++ extension settings setup.py asks for: its include
folder has no headers, so adaptalloc's torch extensions cannot compile."""
import os
__version__ = "2.99.0+fake"
class version:
    cuda = "12.8"
class _C:
    _GLIBCXX_USE_CXX11_ABI = 1
class cuda:
    @staticmethod
    def is_available():
        return False
    @staticmethod
    def device_count():
        return 0
''',
    "torch/utils/__init__.py": "",
    "torch/utils/cpp_extension.py": '''import os
class _Ext:
    def __init__(self, name, sources):
        self.include_dirs = [os.path.join(os.path.dirname(__file__), "no-headers-here")]
        self.library_dirs = []
        self.libraries = ["c10", "torch"]
def CppExtension(name, sources, **kw):
    return _Ext(name, sources)
def CUDAExtension(name, sources, **kw):
    return _Ext(name, sources)
''',
}


def _offline_wheelhouse(where):
    """setuptools and wheel as wheels, for pip's isolated build environment
    without an index: Debian's setuptools wheel (python3-pip-whl) and one
    packed from Debian's installed wheel module. None when either is
    missing."""
    import glob
    import shutil
    import subprocess
    st = glob.glob("/usr/share/python-wheels/setuptools-*.whl")
    src = "/usr/lib/python3/dist-packages/wheel"
    if not st or not os.path.isdir(src) or not os.path.exists("/usr/bin/python3"):
        return None
    os.makedirs(where)
    shutil.copy(st[0], where)
    ver = subprocess.run(["/usr/bin/python3", "-c", "import wheel; print(wheel.__version__)"],
                         capture_output=True, text=True).stdout.strip()
    tree = os.path.join(where, "tree", "wheel-" + ver)
    shutil.copytree(src, os.path.join(tree, "wheel"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    di = os.path.join(tree, "wheel-%s.dist-info" % ver)
    os.makedirs(di)
    with open(os.path.join(di, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: wheel\nVersion: %s\n" % ver)
    with open(os.path.join(di, "WHEEL"), "w") as f:
        f.write("Wheel-Version: 1.0\nGenerator: adaptalloc-test\nRoot-Is-Purelib: true\n"
                "Tag: py3-none-any\n")
    with open(os.path.join(di, "entry_points.txt"), "w") as f:
        f.write("[distutils.commands]\nbdist_wheel = wheel.bdist_wheel:bdist_wheel\n")
    r = subprocess.run(["/usr/bin/python3", "-m", "wheel", "pack", tree, "-d", where],
                       capture_output=True, text=True)
    return where if r.returncode == 0 else None


def test_isolated_build_uses_the_environments_torch_and_fails_loudly(tmp_path):
    """pip install . with pip's default build isolation (offline: setuptools
    and wheel from a local wheelhouse) into a virtual environment that has
    torch (a stand-in CUDA build whose headers are missing): setup.py finds
    the environment's torch although the isolation hides it, tries to build
    the native allocator against it, and the install FAILS, the reason and
    the two ways on shown without pip -v. With ADAPTALLOC_ALLOW_NO_NATIVE=1
    it installs, and native_available() names the compile failure and the
    torch it was for."""
    import subprocess
    import sysconfig
    wh = _offline_wheelhouse(str(tmp_path / "wheelhouse"))
    if wh is None:
        pytest.skip("no offline setuptools/wheel wheels (Debian python3-pip-whl, python3-wheel)")
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for rel, text in FAKE_ENV_TORCH.items():
        path = os.path.join(site, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ADAPTALLOC_", "PIP_", "PYTHON"))}
    cmd = [py, "-m", "pip", "install", "--no-index", "--find-links", wh,
           "--disable-pip-version-check", ROOT]
    r = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "pip's build isolation hides the environment's torch: using the one in " + site \
        in out, out[-3000:]
    assert "the native PyTorch allocator cannot be built" in out, out[-3000:]
    assert "did not compile against torch 2.99.0+fake" in out, out[-3000:]
    assert "ADAPTALLOC_ALLOW_NO_NATIVE=1 pip install ." in out, out[-3000:]
    r = subprocess.run(cmd, cwd=str(tmp_path), env=dict(env, ADAPTALLOC_ALLOW_NO_NATIVE="1"),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    r = subprocess.run([py, "-c", "import adaptalloc.torch as t; print(t.native_available())"],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "False" in r.stdout and "did not compile against torch 2.99.0+fake" in r.stdout, r.stdout
    assert "fix that, then reinstall adaptalloc" in r.stdout, r.stdout


def test_native_available_says_why_not_built(run_py):
    r = run_py("""
        import json
        import importlib.util
        import adaptalloc.torch as t
        ok, why = t.native_available()
        built = importlib.util.find_spec("adaptalloc._torch_native") is not None
        print(json.dumps({"ok": ok, "why": why, "built": built}))
    """)
    assert r.rc == 0, r.err
    j = r.json()
    if j["built"]:
        pytest.skip("this package has the native allocator (tests/gpu covers it)")
    assert j["ok"] is False
    # what is wrong and what to do, not "cannot import name '_torch_native'"
    assert "installed without its native allocator" in j["why"], j["why"]
    assert "install torch, then reinstall adaptalloc" in j["why"], j["why"]


def test_regions_names_policy_and_stats_without_torch(run_py):
    r = run_py("""
        import json, adaptalloc, adaptalloc.torch as at
        out = {}
        # names are checked at once, clearly, and nothing is registered
        for bad in ["", "kv cache", "9kv", "a" * 21, "k\\u00e9", "kv\\x00"]:
            try:
                adaptalloc.region_id(bad)
                out[repr(bad)] = "accepted"
            except ValueError as e:
                out[repr(bad)] = str(e)
        try:
            adaptalloc.region_id(3)
        except TypeError as e:
            out["type"] = str(e)
        out["kv"] = [adaptalloc.region_id("kv_cache"), adaptalloc.region_id("kv_cache")]
        ids = [adaptalloc.region_id("r%d" % i) for i in range(1, 16)]
        try:
            adaptalloc.region_id("one_more")
        except adaptalloc.AdaptallocError as e:
            out["limit"] = str(e)
        out["ids"] = ids
        # a region section in the policy: merged, written back, refused whole when bad
        v = adaptalloc.patch_policy({"pools": {"regions": {"kv_cache": {"limit_bytes": 1 << 30}}}})
        out["section"] = adaptalloc.policy()["pools"]["regions"]["kv_cache"]["limit_bytes"]
        try:
            adaptalloc.patch_policy({"pools": {"regions": {"kv_cache": {"limt_bytes": 1}}}})
        except adaptalloc.PolicyError as e:
            out["bad_key"] = str(e)
        out["same_version"] = adaptalloc.policy_version() == v
        out["region_stats"] = adaptalloc.region_stats()
        # before install() a region warns once and routes nothing
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with at.region("kv_cache"):
                out["current"] = at.current_region()
            with at.region("kv_cache"):
                pass
        out["warnings"] = [str(x.message) for x in w]
        print(json.dumps(out))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert "is empty" in d["''"]
    assert "byte 2" in d["'kv cache'"]
    assert "starts with an ASCII letter" in d["'9kv'"]
    assert "at most 20 bytes" in d[repr("a" * 21)]
    assert "not a region name" in d[repr("k\u00e9")]
    assert "NUL" in d[repr("kv\x00")]
    assert "must be a str" in d["type"]
    assert d["kv"] == [0, 0] and d["ids"] == list(range(1, 16))
    assert "16 regions" in d["limit"]
    assert d["section"] == 1 << 30
    assert "pools.regions.kv_cache.limt_bytes: unknown key" in d["bad_key"]
    assert d["same_version"] is True
    assert d["region_stats"] == {}
    assert d["current"] is None
    assert len(d["warnings"]) == 1 and "install() has not run" in d["warnings"][0]


def test_managed_without_torch_or_gpu_says_why(run_py):
    """Managed memory without torch: the tensor functions say they need it;
    the C layer's checks answer clearly (a host address is not managed
    memory, a bad location or kind is named); without a GPU a managed block
    cannot be had and says so. A policy with a managed region round-trips."""
    r = run_py("""
        import json, adaptalloc, adaptalloc.torch as at
        from adaptalloc import _C
        out = {"all": [n for n in ("managed_empty", "prefetch", "managed_range_info")
                       if n in at.__all__]}
        for name, call in [("empty", lambda: at.managed_empty((2, 3))),
                           ("prefetch", lambda: at.prefetch(None, "cpu")),
                           ("info", lambda: at.managed_range_info(None))]:
            try:
                call()
                out[name] = "ran"
            except ImportError as e:
                out[name] = str(e)
        try:
            _C.Block("bogus", 16)
        except ValueError as e:
            out["kind"] = str(e)
        buf = bytearray(64)
        import ctypes
        addr = ctypes.addressof((ctypes.c_char * 64).from_buffer(buf))
        for name, call in [("pf_host", lambda: _C.managed_prefetch(addr, 64, 0, None)),
                           ("pf_loc", lambda: _C.managed_prefetch(addr, 64, -7, None)),
                           ("pf_size", lambda: _C.managed_prefetch(addr, 0, 0, None)),
                           ("adv_loc", lambda: _C.managed_advise(addr, 64, 0, "gpu", "none", False)),
                           ("info_host", lambda: _C.managed_range_info(addr, 64))]:
            try:
                call()
                out[name] = "ran"
            except (ValueError, RuntimeError) as e:
                out[name] = "%s: %s" % (type(e).__name__, e)
        out["gpus"] = adaptalloc.cuda_device_count()
        if out["gpus"] == 0:
            try:
                _C.Block("managed", 1024)
                out["block"] = "ran"
            except RuntimeError as e:
                out["block"] = str(e)
        adaptalloc.patch_policy({"pools": {"regions": {"opt": {
            "backend": "managed", "advise": {"preferred_location": "device"}}}}})
        sec = adaptalloc.policy()["pools"]["regions"]["opt"]
        out["section"] = [sec["backend"], sec["advise"], sec["allow_oversubscribe"]]
        try:
            adaptalloc.patch_policy({"pools": {"regions": {"opt": {"allow_oversubscribe": "yes"}}}})
        except adaptalloc.PolicyError as e:
            out["bad"] = str(e)
        print(json.dumps(out))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["all"] == ["managed_empty", "prefetch", "managed_range_info"]
    for name, fn in [("empty", "managed_empty"), ("prefetch", "prefetch"),
                     ("info", "managed_range_info")]:
        assert "adaptalloc.torch.%s needs PyTorch" % fn in d[name]
    assert "'pinned', 'host' or 'managed', not 'bogus'" in d["kind"]
    assert d["pf_loc"].startswith("ValueError") and "not -7" in d["pf_loc"]
    assert d["pf_size"].startswith("ValueError") and "size must be > 0" in d["pf_size"]
    assert d["adv_loc"].startswith("ValueError") and "not 'gpu'" in d["adv_loc"]
    # a CUDA build says "not managed memory"; one without CUDA "not supported"
    for name in ("pf_host", "info_host"):
        assert ("not managed memory" in d[name]) or ("not supported" in d[name]), d[name]
    if d["gpus"] == 0:
        assert "no managed-memory pool for device 0" in d["block"]
    assert d["section"] == ["managed", {"preferred_location": "device", "accessed_by": "none",
                                        "read_mostly": False}, False]
    assert "pools.regions.opt.allow_oversubscribe: expected true or false" in d["bad"]


STANDIN_TORCH = '''
"""A stand-in for torch with what adaptalloc.torch.pinned_empty's routing reads."""
__version__ = "0.0-standin"
class dtype:
    def __init__(self, name):
        self.name = name
    def __repr__(self):
        return "torch." + self.name
float32, float16 = dtype("float32"), dtype("float16")
class _C:
    @staticmethod
    def _cuda_getCurrentRawStream(device):
        return 1000 + device
class version:
    cuda = "12.8"
class cuda:
    class Stream:
        def __init__(self, handle, device=0):
            self.cuda_stream = handle
            self.device = type("device", (), {"index": device})()
    @staticmethod
    def current_device():
        return 3
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def device_count():
        return 4
'''


STANDIN_TORCH_CPU = '''
"""A stand-in for a CPU-only torch (torch.version.cuda is None) whose
torch.cuda raises what PyTorch's raises without CUDA."""
__version__ = "2.99.0+cpu"
class dtype:
    pass
float32 = dtype()
class version:
    cuda = None
class cuda:
    class Stream:
        pass
    @staticmethod
    def is_available():
        return False
    @staticmethod
    def device_count():
        return 0
    @staticmethod
    def current_device():
        raise AssertionError("Torch not compiled with CUDA enabled")
'''


def test_cuda_helpers_without_cuda_raise_adaptallocs_error(run_py, tmp_path):
    """pinned_empty, pin, mapped_empty, pack, Prefetcher, serve_pinned,
    managed_empty and prefetch on a CPU-only torch, and on a CUDA torch that
    sees no GPU: adaptalloc's CUDAUnavailableError (a RuntimeError) naming
    the helper, why and what to do, never torch's raw AssertionError."""
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "torch.py").write_text(STANDIN_TORCH_CPU)
    code = """
        import json, sys
        sys.path.insert(0, "standin")
        import torch
        if len(sys.argv) > 1:          # a CUDA build that sees no device
            torch.version.cuda = "12.8"
        import adaptalloc.torch as aat
        out = {}
        calls = {"pinned_empty": lambda: aat.pinned_empty(4),
                 "pin": lambda: aat.pin(object()),
                 "mapped_empty": lambda: aat.mapped_empty(4),
                 "pack": lambda: aat.pack([]),
                 "Prefetcher": lambda: aat.Prefetcher([]),
                 "serve_pinned": lambda: aat.serve_pinned(True),
                 "managed_empty": lambda: aat.managed_empty(4),
                 "prefetch": lambda: aat.prefetch(None, "cpu")}
        for name, call in calls.items():
            try:
                call()
                out[name] = "ran"
            except aat.CUDAUnavailableError as e:
                out[name] = ["CUDAUnavailableError", isinstance(e, RuntimeError), str(e)]
            except BaseException as e:
                out[name] = [type(e).__name__, str(e)]
        print(json.dumps(out))
    """
    for args, why in (((), "built without CUDA, a CPU-only build"),
                      (("nogpu",), "no CUDA device is visible to torch")):
        r = run_py(code, args=args, env={"CUDA_VISIBLE_DEVICES": None})
        assert r.rc == 0, r.err
        out = r.json()
        for name, got in out.items():
            assert got[0] == "CUDAUnavailableError" and got[1] is True, (name, got)
            assert got[2].startswith("adaptalloc.torch.%s needs CUDA: " % name), got
            assert why in got[2], (name, got)
    assert "CUDAUnavailableError" in run_py(
        "import adaptalloc.torch as t; print(t.__all__)").out


def test_pinned_empty_makes_one_call_into_the_cpp_helper(run_py, tmp_path):
    """With the C++ helper, pinned_empty hands shape and dtype over untouched
    (C++ checks them) and lets C++ read the current stream when it can
    (CURRENT_STREAM); else, or for an explicit stream, it passes the raw
    handle. A stand-in torch and helper record the calls."""
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "torch.py").write_text(STANDIN_TORCH)
    r = run_py("""
        import json, sys
        sys.path.insert(0, "standin")
        import torch
        import adaptalloc.torch as aat
        calls = []
        class Ext:
            CURRENT_STREAM = True
            def pinned_empty(self, *args):
                calls.append([repr(a) for a in args])
                return "tensor"
        aat._ext = Ext()
        out = [aat.pinned_empty((2, 3)), aat.pinned_empty(4, torch.float16),
               aat.pinned_empty([5], stream=torch.cuda.Stream(77))]
        Ext.CURRENT_STREAM = False      # built without CUDA's headers
        out.append(aat.pinned_empty(6))
        # a device's default stream (raw handle 0 on every device) is passed
        # as that device's own handle, _C.default_stream(device)
        out.append(aat.pinned_empty(8, stream=torch.cuda.Stream(0, 2)))
        torch._C._cuda_getCurrentRawStream = staticmethod(lambda device: 0)
        out.append(aat.pinned_empty(9))
        from adaptalloc import _C
        defaults = [_C.default_stream(2), _C.default_stream(3)]
        try:
            _C.default_stream(-1)
        except ValueError as e:
            defaults.append(str(e))
        try:
            aat.pinned_empty(7, stream="s")
            err = None
        except TypeError as e:
            err = str(e)
        print(json.dumps({"calls": calls, "out": out, "err": err, "defaults": defaults}))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["out"] == ["tensor"] * 6
    d2, d3 = d["defaults"][:2]
    assert d2 != d3 and 0 not in (d2, d3), d["defaults"]
    assert "device -1 is not in 0..255" in d["defaults"][2]
    assert d["calls"] == [["(2, 3)", "None"], ["4", "torch.float16"], ["[5]", "None", "77"],
                          ["6", "None", "1003"], ["8", "None", str(d2)],
                          ["9", "None", str(d3)]], d
    assert d["err"] and "stream must be a torch.cuda.Stream" in d["err"]


STANDIN_TORCH_DEVICES = '''
"""A stand-in for torch with devices and streams, what pack's and
Prefetcher's argument checks read."""
__version__ = "0.0-standin"
class device:
    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        elif ":" in spec:
            spec, index = spec.split(":")[0], int(spec.split(":")[1])
        self.type, self.index = spec, index
    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)
    def __repr__(self):
        return "%s:%s" % (self.type, self.index)
class Tensor:
    pass
class version:
    cuda = "12.8"
class cuda:
    class Stream:
        def __init__(self, handle, index):
            self.cuda_stream = handle
            self.device = device("cuda", index)
    @staticmethod
    def current_device():
        return 0
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def device_count():
        return 2
'''


def test_pack_and_prefetcher_refuse_another_devices_stream(run_py, tmp_path):
    """pack and Prefetcher copy with the target device current: a stream of
    another device (its default stream is 0 to CUDA, like every device's)
    would put the copy in the wrong queue. Both refuse it, naming the two
    devices, before anything is packed or allocated."""
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "torch.py").write_text(STANDIN_TORCH_DEVICES)
    r = run_py("""
        import json, sys
        sys.path.insert(0, "standin")
        import torch
        import adaptalloc.torch as aat
        errs = []
        try:
            aat.pack([], device="cuda:0", stream=torch.cuda.Stream(0, 1))
        except ValueError as e:
            errs.append(str(e))
        try:
            iter(aat.Prefetcher([], device="cuda:1", stream=torch.cuda.Stream(0, 0))).__next__()
        except ValueError as e:
            errs.append(str(e))
        print(json.dumps(errs))
    """)
    assert r.rc == 0, r.err
    errs = r.json()
    assert errs == ["adaptalloc.torch.pack: stream is on cuda:1, not on the target cuda:0",
                    "adaptalloc.torch.Prefetcher: stream is on cuda:0, not on the target "
                    "cuda:1"], errs


def test_serve_pinned_checks_and_routes(run_py, tmp_path):
    """serve_pinned takes a bool, says why it cannot serve without the C++
    helper (switching off is then a no-op), and hands the setting to the
    helper, returning the previous one. A stand-in torch and helper."""
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "torch.py").write_text(STANDIN_TORCH)
    r = run_py("""
        import json, sys
        sys.path.insert(0, "standin")
        import torch
        import adaptalloc.torch as aat
        out = {}
        try:
            aat.serve_pinned("yes")
        except TypeError as e:
            out["type"] = str(e)
        aat._ext = None
        try:
            aat.serve_pinned()
        except RuntimeError as e:
            out["none"] = str(e)
        out["off_without"] = aat.serve_pinned(False)
        calls = []
        class Ext:
            state = False
            def serve_pinned(self, on):
                calls.append(on)
                prev, Ext.state = Ext.state, on
                return prev
        aat._ext = Ext()
        out["first"] = aat.serve_pinned()
        out["second"] = aat.serve_pinned(False)
        out["calls"] = calls
        print(json.dumps(out))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert "enable must be True or False" in d["type"]
    assert "needs the C++ helper adaptalloc._torch_ext" in d["none"], d
    assert d["off_without"] is False
    assert d["first"] is False and d["second"] is True and d["calls"] == [True, False]


def test_public_namespace_is_all_and_the_subpackages(run_py):
    r = run_py("""
        import json, types, adaptalloc
        before = sorted(n for n in dir(adaptalloc) if not n.startswith("_"))
        import adaptalloc.torch
        after = sorted(n for n in dir(adaptalloc) if not n.startswith("_"))
        star = {}
        exec("from adaptalloc import *", star)
        print(json.dumps({"before": before, "after": after, "all": list(adaptalloc.__all__),
                          "star": sorted(k for k in star if k != "__builtins__"),
                          "modules": sorted(n for n in after
                                            if isinstance(getattr(adaptalloc, n), types.ModuleType)),
                          "missing": sorted(n for n in adaptalloc.__all__ if not hasattr(adaptalloc, n))}))
    """)
    assert r.rc == 0, r.err
    d = r.json()
    assert d["missing"] == [], "__all__ names what the package lacks"
    assert "json" not in d["before"] and "os" not in d["before"] and "sys" not in d["before"]
    # everything public is in __all__ (the version string aside), nothing else
    assert sorted(set(d["before"]) - {"__version__"}) == sorted(d["all"])
    assert d["star"] == sorted(d["all"])
    # importing the torch subpackage adds it, and only it
    assert sorted(set(d["after"]) - set(d["before"])) == ["torch"]
    assert d["modules"] == ["torch"], "a module leaked into the namespace: %s" % d["modules"]
    for fn in ("region_id", "policy_version", "stats", "configure"):
        assert fn in d["all"], fn


def test_setup_without_wheel_names_what_is_missing(tmp_path):
    # setup.py as pip's wheel build runs it, in a Python where 'wheel' cannot
    # be imported: a message naming the module and the package, not
    # "invalid command 'bdist_wheel'"; nothing is built.
    # Both commands pip's PEP 517 build runs: dist_info (the metadata, first)
    # and bdist_wheel.
    import subprocess
    import setuptools
    if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) >= (70, 1):
        pytest.skip("setuptools %s builds wheels without the wheel module" % setuptools.__version__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for cmd in ("dist_info", "bdist_wheel"):
        work = tmp_path / cmd
        work.mkdir()
        code = ("import runpy, sys; sys.modules['wheel'] = None; "
                "sys.argv = ['setup.py', %r]; "
                "runpy.run_path(%r, run_name='__main__')" % (cmd, os.path.join(root, "setup.py")))
        r = subprocess.run([sys.executable, "-c", code], cwd=str(work), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode != 0, cmd
        assert "needs the Python module 'wheel'" in r.stderr, (cmd, r.stderr)
        assert "python3-wheel" in r.stderr and "invalid command" not in r.stderr
        assert not os.listdir(str(work)), "setup.py %s built something: %s" % (
            cmd, os.listdir(str(work)))


def test_oom_snapshot_path_rules(run_py, tmp_path):
    """install(oom_snapshot=...)'s path, checked before anything changes:
    {rank} and {pid} expanded, made absolute; a missing or unwritable folder,
    a folder itself, an empty path and a non-string each refused naming it;
    ADAPTALLOC_OOM_SNAPSHOT is the default."""
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    (tmp_path / "adir").mkdir()
    r = run_py("""
        import json, os
        from adaptalloc.torch import _oom
        out = {"ok": _oom.resolve("snap-{rank}-{pid}.pickle"), "pid": os.getpid(),
               "env": _oom.prepare(None), "arg": _oom.prepare("a.pickle"), "none": None,
               "errors": {}}
        os.environ.pop("ADAPTALLOC_OOM_SNAPSHOT")
        out["none"] = _oom.prepare(None)
        for name, bad in (("missing", "nope/x.pickle"), ("ro", "ro/x.pickle"),
                          ("folder", "adir"), ("empty", ""), ("type", 3)):
            try:
                _oom.resolve(bad)
                out["errors"][name] = None
            except (TypeError, ValueError) as e:
                out["errors"][name] = str(e)
        print(json.dumps(out))
    """, env={"LOCAL_RANK": "3", "ADAPTALLOC_OOM_SNAPSHOT": "e-{rank}.pickle"})
    assert r.rc == 0, r.err
    d = r.json()
    assert d["ok"] == str(tmp_path / ("snap-3-%d.pickle" % d["pid"]))
    assert d["env"] == [str(tmp_path / "e-3.pickle"), True]
    assert d["arg"] == [str(tmp_path / "a.pickle"), False]
    assert d["none"] == [None, False]
    e = d["errors"]
    assert "does not exist" in e["missing"] and "nope" in e["missing"]
    if os.geteuid() != 0:  # root writes anywhere
        assert "not writable" in e["ro"]
    assert "is a folder" in e["folder"]
    assert "non-empty" in e["empty"]
    assert "must be a path" in e["type"]


def test_command_line_is_installed(aa_python):
    """python -m adaptalloc and the adaptalloc script (cli.py) run from the
    installed package; against no job they say so in one line, exit 3."""
    import subprocess
    r = subprocess.run([aa_python, "-m", "adaptalloc", "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "status" in r.stdout and "policy" in r.stdout and "exit codes" in r.stdout
    script = os.path.join(os.path.dirname(aa_python), "adaptalloc")
    if os.path.exists(script):  # a venv's bin (ADAPTALLOC_TEST_PYTHON may be another)
        r = subprocess.run([script, "--url", "127.0.0.1:1", "status"], capture_output=True,
                           text=True)
        assert r.returncode == 3, r.stderr
        assert r.stderr.startswith("adaptalloc: ") and len(r.stderr.strip().splitlines()) == 1


def test_http_changes_need_the_token_file(run_py, tmp_path):
    """No ADAPTALLOC_TOKEN: the server's token is in adaptalloc.token_file()
    (0600); an HTTP PATCH without it is refused 401 and changes nothing, with
    it applied; in-process patch_policy needs none."""
    xdg = tmp_path / "run"
    xdg.mkdir(mode=0o700)
    r = run_py("""
        import json, os, stat, urllib.request, urllib.error, adaptalloc
        adaptalloc.start()
        f = adaptalloc.token_file()
        base = adaptalloc.url().rstrip("/")
        def patch(doc, token=None):
            h = {"Content-Type": "application/merge-patch+json"}
            if token:
                h["Authorization"] = "Bearer " + token
            req = urllib.request.Request(base + "/policy", data=json.dumps(doc).encode(),
                                         method="PATCH", headers=h)
            try:
                with urllib.request.urlopen(req) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
        no = patch({"pools": {"host": {"limit_bytes": 268435456}}})
        v_no = adaptalloc.policy_version()
        token = open(f).readline().strip()
        yes = patch({"adapt": {"interval_ms": 500}}, token)
        v_yes = adaptalloc.policy_version()
        v_api = adaptalloc.patch_policy({"adapt": {"interval_ms": 600}})
        print(json.dumps({"file": f, "mode": stat.S_IMODE(os.stat(f).st_mode), "no": no,
                          "v_no": v_no, "yes": yes, "v_yes": v_yes, "v_api": v_api,
                          "limit": adaptalloc.policy()["pools"]["host"]["limit_bytes"]}))
    """, env={"XDG_RUNTIME_DIR": str(xdg)})
    assert r.rc == 0, r.err
    d = r.json()
    assert d["file"].startswith(str(xdg) + "/adaptalloc/") and d["file"].endswith(".token")
    assert d["mode"] == 0o600
    assert (d["no"], d["v_no"], d["limit"]) == (401, 1, 0)
    assert (d["yes"], d["v_yes"], d["v_api"]) == (200, 2, 3)
    r = run_py("import adaptalloc; adaptalloc.start(); print(adaptalloc.token_file())",
               env={"ADAPTALLOC_TOKEN": "chosen", "XDG_RUNTIME_DIR": str(xdg)})
    assert r.rc == 0 and r.out.strip() == "None", r.err
