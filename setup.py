"""Builds the adaptalloc Python package (pip install . from the repository).

1. CMake builds, in one run over the whole project, libadaptalloc (the C
   library with its runtime: store, policy loop, HTTP server) and, with CUDA,
   the CUDAPluggableAllocator fallback libadaptalloc_torch.so linked to it, in
   Release, without tests or benchmarks; and, when torch is importable here,
   the torch module's Python extensions (torch/CMakeLists.txt):
   adaptalloc._torch_native, the native torch allocator (torch/native/*.cpp,
   needs CUDA), and adaptalloc._torch_ext, the pinned-tensor and pack helpers
   (torch/ext/torch_ext.cpp; with CUDA's headers when there are, so that it
   reads the current stream itself, else without them). torch's paths and
   flags come from torch.utils.cpp_extension as CMake cache variables
   (_torch_cmake_args). A torch extension that fails to build is reported
   and left out. Everything goes into the package with an rpath of $ORIGIN.
2. adaptalloc._C, the CPython extension over the C API, links to them.
3. policies/*.json ship as adaptalloc/policies/.

The torch the extensions are built against is the one of the environment
being installed into, also under pip's default build isolation (which hides
that environment's site-packages from this script): when torch does not
import here, the environment's own site-packages are searched for it
(_find_env_torch) and added to the end of sys.path. The build never silently
loses the native allocator: when torch is there (a CUDA build) and
adaptalloc._torch_native cannot be built -- no CUDA Toolkit, a compiler
error, a torch that does not import -- the install FAILS, with the reason,
the compiler's last lines and the two ways on (fix it, or say
ADAPTALLOC_ALLOW_NO_NATIVE=1 to install without it). What the build found
and did is kept in the package as adaptalloc/_build_info.json, which
adaptalloc.torch.native_available() reads to name the real cause.

Environment:
  ADAPTALLOC_CMAKE_ARGS  extra CMake arguments (e.g. -DCMAKE_PREFIX_PATH=...)
  ADAPTALLOC_BUILD_JOBS  parallel build jobs (default: CPU count)
  ADAPTALLOC_NO_TORCH=1  do not build the torch extensions even if torch is here
  ADAPTALLOC_ALLOW_NO_NATIVE=1  install even when the native allocator cannot be
                         built for the torch here (the pluggable fallback only)
Offline: pip install --no-build-isolation .
"""
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def _check_wheel():
    """pip builds the package through 'setup.py dist_info' (the metadata)
    and 'setup.py bdist_wheel', commands that setuptools before 70.1 takes
    from the wheel module: without it the build stops at "invalid command
    'bdist_wheel'" or in the metadata step, with no hint. Say what is missing
    and how to get it instead, before anything is built."""
    if not {"bdist_wheel", "dist_info"} & set(sys.argv[1:]):
        return
    import importlib.util
    if importlib.util.find_spec("wheel") is not None:
        return
    try:
        if importlib.util.find_spec("setuptools.command.bdist_wheel") is not None:
            return  # setuptools >= 70.1 has its own
    except ImportError:
        pass
    sys.exit("adaptalloc: building a wheel needs the Python module 'wheel', which %s "
             "does not have. Install it (Debian: apt-get install python3-wheel; in a "
             "virtual environment: pip install wheel) and run pip again, or let pip "
             "fetch it from an index (pip install . without --no-build-isolation)."
             % sys.executable)


_check_wheel()
INCLUDES = [os.path.join(ROOT, d) for d in
            ("core/include", "transfer/include", "runtime/include", "torch/include")]
LIB = "libadaptalloc.so.0"
PLUGIN = "libadaptalloc_torch.so"


# What the build found and did (adaptalloc/_build_info.json in the package).
BUILD_INFO = {"version": 1, "torch": None, "torch_path": None, "torch_cuda": None,
              "torch_from": None, "torch_error": None, "cuda_toolkit": None,
              "native": "not built", "native_why": None, "ext": "not built",
              "compiler_tail": None}


def _compiler_errors(log):
    """The compiler's error lines of a build log (the first few, each file
    once), else its last lines: what a reader needs, not ninja's tail."""
    errs = []
    for line in log.splitlines():
        if ("error:" in line or "Error " in line or "fatal error" in line) and line not in errs:
            errs.append(line.strip())
        if len(errs) == 6:
            break
    return "\n".join(errs) if errs else "\n".join(log.strip().splitlines()[-15:])


def _allow_no_native():
    return os.environ.get("ADAPTALLOC_ALLOW_NO_NATIVE") == "1"


def _fail_native(why, tail=None):
    """The torch here gets no native allocator: stop the install, loudly
    (pip shows a failed build's output without -v), unless the user said
    ADAPTALLOC_ALLOW_NO_NATIVE=1; then keep why for native_available()."""
    BUILD_INFO["native"] = "not built"
    BUILD_INFO["native_why"] = why
    if tail:
        BUILD_INFO["compiler_tail"] = tail[-4000:]
    if _allow_no_native():
        print("adaptalloc: WARNING: %s; installing without the native allocator "
              "(ADAPTALLOC_ALLOW_NO_NATIVE=1)" % why, file=sys.stderr)
        return
    msg = ["", "=" * 72,
           "adaptalloc: the native PyTorch allocator cannot be built: %s." % why]
    if tail:
        msg += ["The compiler says:", tail[-3000:].rstrip()]
    msg += ["Without it, torch.cuda.memory_stats, CUDA graphs and "
            "torch.compile(mode='reduce-overhead') do not work with adaptalloc.",
            "Fix the cause and run pip again, or install without it:",
            "    ADAPTALLOC_ALLOW_NO_NATIVE=1 pip install .      (the pluggable fallback)",
            "    ADAPTALLOC_NO_TORCH=1 pip install .             (no torch extensions at all)",
            "=" * 72]
    sys.exit("\n".join(msg))


def _env_site_dirs():
    """The import path of the environment being installed into, as its own
    interpreter has it without pip's isolation: the same interpreter run with
    -I (which ignores the PYTHONPATH and PYTHONNOUSERSITE pip's isolated
    build sets), so that a venv's site-packages, the system's under
    --system-site-packages, Debian's dist-packages and a conda prefix are all
    as they are at run time; sysconfig's purelib and platlib besides."""
    dirs = []
    try:
        r = subprocess.run([sys.executable, "-I", "-c",
                            "import json, sys; print(json.dumps(sys.path))"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            dirs += [d for d in json.loads(r.stdout) if isinstance(d, str)]
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    dirs += [sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")]
    out = []
    for d in dirs:
        if d and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def _find_env_torch():
    """The folder holding the environment's torch package when torch does
    not import here (pip's build isolation), else None."""
    for d in _env_site_dirs():
        if os.path.isfile(os.path.join(d, "torch", "__init__.py")) and d not in sys.path:
            return d
    return None


def _torch():
    """torch and its cpp_extension helpers, or None. Under pip's build
    isolation the environment's torch is found and used (_find_env_torch).
    Sets BUILD_INFO's torch fields. A torch that is there but does not
    import fails the install (_fail_native), unless allowed."""
    if os.environ.get("ADAPTALLOC_NO_TORCH") == "1":
        BUILD_INFO["torch_error"] = "ADAPTALLOC_NO_TORCH=1 at build time"
        return None
    if BUILD_INFO.get("_probed"):
        return BUILD_INFO.get("_found")
    BUILD_INFO["_probed"] = True
    import importlib.util
    here = None
    try:
        here = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        pass
    if here is None or not here.origin or os.path.dirname(os.path.dirname(here.origin)) == ROOT:
        env = _find_env_torch()
        if env is None:
            BUILD_INFO["torch_error"] = ("torch was not installed in %s when adaptalloc was "
                                         "built" % sys.prefix)
            print("adaptalloc: no torch in this environment: no torch extensions (install "
                  "torch, then reinstall adaptalloc, for the native allocator)")
            return None
        sys.path.append(env)
        BUILD_INFO["torch_from"] = "the environment's site-packages, hidden by build isolation"
        print("adaptalloc: pip's build isolation hides the environment's torch: using the one "
              "in %s" % env)
    try:
        import torch
        import torch.utils.cpp_extension as cpp  # fails for the repository's torch/ folder
        if not hasattr(torch, "__version__"):
            raise ImportError("'torch' here is %s, not PyTorch" % list(getattr(torch, "__path__", [])))
    except Exception as e:
        BUILD_INFO["torch_error"] = "torch did not import at build time (%s: %s)" % (
            type(e).__name__, e)
        _fail_native("torch is installed but does not import here (%s: %s)"
                     % (type(e).__name__, e))
        return None
    BUILD_INFO["torch"] = torch.__version__
    BUILD_INFO["torch_path"] = os.path.dirname(os.path.abspath(torch.__file__))
    BUILD_INFO["torch_cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    BUILD_INFO["torch_from"] = BUILD_INFO["torch_from"] or "importable at build time"
    print("adaptalloc: building the torch extensions against torch %s (%s)"
          % (torch.__version__, BUILD_INFO["torch_path"]))
    BUILD_INFO["_found"] = (torch, cpp)
    return torch, cpp


def _torch_flags(torch, cpp):
    """The compile flags of a torch extension (TORCH_EXTENSION_NAME is added
    per module by torch/CMakeLists.txt)."""
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    flags = ["-std=c++17", "-O2", "-fvisibility=hidden",
             "-DTORCH_API_INCLUDE_EXTENSION_H", "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi]
    # Older torch passes pybind11 ABI defines to extensions; torch >= 2.9
    # leaves that to pybind11 (and warns when asked).
    pyb = getattr(cpp, "_get_pybind11_abi_build_flags", None)
    if pyb is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            flags += list(pyb())
    return flags


def _torch_cmake_args():
    """The CMake arguments that build the torch module's Python extensions
    against the torch here (torch/CMakeLists.txt), or the one that turns
    them off. The paths and libraries are those torch.utils.cpp_extension
    gives its CppExtension (the plain build) and CUDAExtension (with CUDA:
    _torch_native and the CUDA flavour of _torch_ext); without a CUDA
    toolkit only the plain _torch_ext is built."""
    off = ["-DAA_TORCH_EXTENSIONS=OFF"]
    found = _torch()
    if found is None:
        return off
    torch, cpp = found
    try:
        plain = cpp.CppExtension("adaptalloc._probe", ["probe.cpp"])
    except Exception as e:
        _fail_native("torch %s gives no C++ extension settings here (%s)" % (torch.__version__, e))
        return off
    try:
        cuda = cpp.CUDAExtension("adaptalloc._probe", ["probe.cpp"])
    except Exception as e:  # e.g. no CUDA_HOME
        print("adaptalloc: cannot build adaptalloc._torch_native here (%s); "
              "adaptalloc._torch_ext without CUDA's headers" % e)
        cuda = None
        BUILD_INFO["native_why"] = ("torch's CUDAExtension settings are not available here "
                                    "(%s)" % e)
    paths = sysconfig.get_paths()
    pyinc = []
    for d in (paths.get("include"), paths.get("platinclude")):
        if d and d not in pyinc:
            pyinc.append(d)

    def lst(v):
        return ";".join(str(x) for x in v)

    args = ["-DAA_TORCH_EXTENSIONS=ON",
            "-DAA_TORCH_CXX_FLAGS=" + lst(_torch_flags(torch, cpp)),
            "-DAA_TORCH_INCLUDE_DIRS=" + lst(plain.include_dirs),
            "-DAA_TORCH_LIBRARY_DIRS=" + lst(plain.library_dirs),
            "-DAA_TORCH_LIBRARIES=" + lst(plain.libraries),
            "-DAA_PYTHON_INCLUDE_DIRS=" + lst(pyinc),
            "-DAA_PYTHON_EXT_SUFFIX=" + sysconfig.get_config_var("EXT_SUFFIX")]
    # (set even when empty: a build folder configured before keeps its cache)
    args += ["-DAA_TORCH_CUDA_INCLUDE_DIRS=" + lst(cuda.include_dirs if cuda else []),
             "-DAA_TORCH_CUDA_LIBRARY_DIRS=" + lst(cuda.library_dirs if cuda else []),
             "-DAA_TORCH_CUDA_LIBRARIES=" + lst(cuda.libraries if cuda else [])]
    return args


# The torch module's Python extensions (torch/CMakeLists.txt): module name,
# CMake target; _torch_ext's CUDA flavour falls back to its plain one.
TORCH_NATIVE = ("_torch_native", "aa_torch_native")
TORCH_EXT_CUDA = ("_torch_ext", "aa_torch_ext_cuda")
TORCH_EXT_PLAIN = ("_torch_ext", "aa_torch_ext_plain")


class BuildExt(build_ext):
    """Runs CMake once for libadaptalloc, the pluggable library and the
    torch extensions, then builds adaptalloc._C against the library and
    copies everything CMake built next to it."""

    def run(self):
        self._cmake()
        super().run()

    def _cmake(self):
        bdir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        os.makedirs(bdir, exist_ok=True)
        args = ["cmake", "-S", ROOT, "-B", bdir,
                "-DCMAKE_BUILD_TYPE=Release",
                "-DAA_BUILD_TESTS=OFF", "-DAA_BUILD_BENCH=OFF",
                "-DAA_TORCH_PLUGIN_SHARED=ON",
                # The libraries carry the rpath they have installed: $ORIGIN
                # (each other) plus the link directories outside the
                # project (CUDA's, a private prefix's).
                "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
                "-DCMAKE_INSTALL_RPATH=$ORIGIN",
                "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        nvcc = "/usr/local/cuda/bin/nvcc"
        if os.path.exists(nvcc) and not shutil.which("nvcc"):
            args.append("-DCUDAToolkit_ROOT=/usr/local/cuda")
        args += shlex.split(os.environ.get("ADAPTALLOC_CMAKE_ARGS", ""))
        if os.path.exists(os.path.join(bdir, "CMakeCache.txt")):
            args = ["cmake", bdir]  # configured before: keep its settings
        # torch's settings each time: torch may have come, gone or changed
        torch_args = _torch_cmake_args()
        jobs = os.environ.get("ADAPTALLOC_BUILD_JOBS") or str(os.cpu_count() or 2)
        subprocess.check_call(args + torch_args,
                              stdout=subprocess.DEVNULL if not self.verbose else None)
        targets = ["adaptalloc"]
        cache = open(os.path.join(bdir, "CMakeCache.txt")).read()
        cuda = "AA_WITH_CUDA:BOOL=ON" in cache
        if cuda:
            targets.append("adaptalloc_torch")
        subprocess.check_call(["cmake", "--build", bdir, "-j", jobs, "--target"] + targets)
        self._libdir = bdir
        lib = os.path.join(bdir, LIB)
        if not os.path.exists(lib):
            raise RuntimeError("adaptalloc: CMake built no %s in %s" % (LIB, bdir))
        self._libs = [lib]
        plugin = os.path.join(bdir, "torch", PLUGIN)
        if cuda and os.path.exists(plugin):
            self._libs.append(plugin)
        BUILD_INFO["cuda_toolkit"] = cuda
        found = _torch()
        if "-DAA_TORCH_EXTENSIONS=ON" in torch_args:
            self._libs += self._torch_modules(bdir, jobs, cache,
                                              "-DAA_TORCH_CUDA_INCLUDE_DIRS=" not in torch_args)
            if found is not None and not BUILD_INFO["torch_cuda"]:
                BUILD_INFO["native_why"] = ("torch %s is a CPU-only build; the native "
                                            "allocator needs a CUDA build of torch"
                                            % BUILD_INFO["torch"])
            if found is not None and BUILD_INFO["native"] != "built" and \
                    BUILD_INFO["torch_cuda"] and not BUILD_INFO.get("compiler_tail"):
                # a CUDA torch, and no native allocator before any compile:
                # no CUDA Toolkit here (nothing to build it, nor the fallback)
                _fail_native("torch %s is a CUDA build (CUDA %s) but %s" % (
                    BUILD_INFO["torch"], BUILD_INFO["torch_cuda"],
                    "adaptalloc found no CUDA Toolkit (nvcc in /usr/local/cuda or on PATH): "
                    "install the toolkit" if not cuda else BUILD_INFO["native_why"] or
                    "its CUDA settings are not usable"))
        for ext in self.extensions:
            ext.library_dirs = [bdir] + list(ext.library_dirs)

    def _torch_modules(self, bdir, jobs, cache, cuda):
        """Builds the torch extensions (side by side, each failure reported
        and left out: the C package stays usable) and returns the paths of
        those that built."""
        suffix = sysconfig.get_config_var("EXT_SUFFIX")

        def out(spec):
            return os.path.join(bdir, "torch", spec[1], spec[0] + suffix)

        want = [TORCH_NATIVE, TORCH_EXT_CUDA] if cuda else [TORCH_EXT_PLAIN]
        for spec in want + [TORCH_EXT_PLAIN]:
            if os.path.exists(out(spec)):
                os.remove(out(spec))  # no module left from an earlier build
        keep_going = []
        if "CMAKE_GENERATOR:INTERNAL=Ninja" in cache:
            keep_going = ["--", "-k", "0"]
        elif "CMAKE_GENERATOR:INTERNAL=Unix Makefiles" in cache:
            keep_going = ["--", "-k"]

        log = []

        def build(specs):
            # the compiler's output is kept (and echoed: pip -v shows it) so
            # that a failure can be shown without -v and recorded
            p = subprocess.run(["cmake", "--build", bdir, "-j", jobs, "--target"] +
                               [t for _, t in specs] + keep_going,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            sys.stdout.write(p.stdout)
            if p.returncode != 0:
                log.append(p.stdout)
            return [s for s in specs if os.path.exists(out(s))]

        built = build(want)
        if cuda and TORCH_EXT_CUDA not in built:
            print("adaptalloc: WARNING: adaptalloc._torch_ext did not build with CUDA's "
                  "headers (the compiler's messages are above); building it without them "
                  "(pinned_empty then takes the current stream from Python)", file=sys.stderr)
            built += build([TORCH_EXT_PLAIN])
        names = {name for name, _ in built}
        BUILD_INFO["ext"] = "built" if "_torch_ext" in names else "not built"
        if "_torch_native" in names:
            BUILD_INFO["native"] = "built"
        for name in ("_torch_native", "_torch_ext"):
            if name in names or (name == "_torch_native" and not cuda):
                continue
            if name == "_torch_native":
                _fail_native("adaptalloc._torch_native did not compile against torch %s"
                             % BUILD_INFO["torch"],
                             _compiler_errors("\n".join(log)) or "(no output)")
                continue
            print("adaptalloc: WARNING: adaptalloc.%s did not build (the compiler's "
                  "messages are above); adaptalloc.torch works without it (tensors made "
                  "in Python)" % name, file=sys.stderr)
        return [out(s) for s in built]

    def build_extensions(self):
        # The package directory in build_lib (or the source tree for --inplace).
        pkgdir = os.path.dirname(self.get_ext_fullpath("adaptalloc._C"))
        os.makedirs(pkgdir, exist_ok=True)
        for lib in self._libs:
            # copyfile, not copy2: the real file under its soname.
            shutil.copyfile(os.path.realpath(lib), os.path.join(pkgdir, os.path.basename(lib)))
        # what this build found and did, for native_available()
        with open(os.path.join(pkgdir, "_build_info.json"), "w") as f:
            json.dump({k: v for k, v in BUILD_INFO.items() if not k.startswith("_")}, f,
                      indent=1)
        # A torch module an earlier build left in the package (build_lib is
        # kept between builds) goes when this build has none: torch gone,
        # ADAPTALLOC_NO_TORCH=1, or it failed to build this time.
        built = {os.path.basename(lib) for lib in self._libs}
        for name in (TORCH_NATIVE[0], TORCH_EXT_PLAIN[0]):
            stale = os.path.join(pkgdir, name + sysconfig.get_config_var("EXT_SUFFIX"))
            if os.path.basename(stale) not in built and os.path.exists(stale):
                os.remove(stale)
        super().build_extensions()


class BuildPy(build_py):
    """Also ships policies/*.json as adaptalloc/policies/."""

    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "adaptalloc", "policies")
        os.makedirs(dst, exist_ok=True)
        for p in glob.glob(os.path.join(ROOT, "policies", "*.json")):
            shutil.copyfile(p, os.path.join(dst, os.path.basename(p)))


cflags = ["-std=c11", "-Wall", "-Wextra", "-O2"]
if sysconfig.get_config_var("Py_DEBUG"):
    cflags.append("-O0")
exts = [Extension("adaptalloc._C", ["python/src/_C.c"], include_dirs=INCLUDES,
                  libraries=["adaptalloc"], extra_compile_args=cflags,
                  extra_link_args=["-Wl,-rpath,$ORIGIN"])]

setup(
    package_dir={"": "python"},
    packages=["adaptalloc", "adaptalloc.torch"],
    ext_modules=exts,
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
    options={"build": {"build_base": "build-py"}},
    zip_safe=False,
)
