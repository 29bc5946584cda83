"""Builds the adaptalloc Python package (pip install . from the repository).

1. CMake builds libadaptalloc (the C library with its runtime: store, policy
   loop, HTTP server) and, with CUDA, the CUDAPluggableAllocator fallback
   libadaptalloc_torch.so linked to it, in Release, without tests or
   benchmarks. Both go into the package with an rpath of $ORIGIN.
2. adaptalloc._C, the CPython extension over the C API, links to them.
3. When torch is importable here: adaptalloc._torch_native, the native torch
   allocator (torch/native/*.cpp, needs CUDA), and adaptalloc._torch_ext, the
   pinned-tensor and pack helpers (python/src/torch_ext.cpp; with CUDA's
   headers when there are, so that it reads the current stream itself),
   compiled against that torch (torch.utils.cpp_extension supplies paths and
   flags). A torch extension that fails to build is reported and left out.
4. policies/*.json ship as adaptalloc/policies/.

Environment:
  ADAPTALLOC_CMAKE_ARGS  extra CMake arguments (e.g. -DCMAKE_PREFIX_PATH=...)
  ADAPTALLOC_BUILD_JOBS  parallel build jobs (default: CPU count)
  ADAPTALLOC_NO_TORCH=1  do not build the torch extensions even if torch is here
Offline: pip install --no-build-isolation .
"""
import concurrent.futures
import glob
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
            ("core/include", "runtime/include", "torch/include")]
LIB = "libadaptalloc.so.0"
PLUGIN = "libadaptalloc_torch.so"


def _torch():
    """torch and its cpp_extension helpers, or None."""
    if os.environ.get("ADAPTALLOC_NO_TORCH") == "1":
        return None
    try:
        import torch
        import torch.utils.cpp_extension as cpp  # fails for the repository's torch/ folder
    except Exception as e:  # a broken torch must not break the C package
        print("adaptalloc: torch not usable here (%s): no torch extensions" % e)
        return None
    return torch, cpp


def _torch_flags(torch, cpp, name):
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    flags = ["-std=c++17", "-O2", "-fvisibility=hidden",
             "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=%s" % name,
             "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi]
    # Older torch passes pybind11 ABI defines to extensions; torch >= 2.9
    # leaves that to pybind11 (and warns when asked).
    pyb = getattr(cpp, "_get_pybind11_abi_build_flags", None)
    if pyb is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            flags += list(pyb())
    return flags


def _torch_extensions():
    """adaptalloc._torch_native (torch/native/*.cpp, needs CUDA) and
    adaptalloc._torch_ext (python/src/torch_ext.cpp), when torch is here."""
    found = _torch()
    if found is None:
        return []
    torch, cpp = found
    exts = []
    srcs = sorted(os.path.relpath(p, ROOT)
                  for p in glob.glob(os.path.join(ROOT, "torch", "native", "*.cpp")))
    # _torch_ext with CUDA's headers (AA_TORCH_EXT_CUDA: pinned_empty reads
    # the current stream in C++), else without (Python passes the stream);
    # a CUDA build that fails to compile falls back to the plain one
    # (BuildExt.build_extension, ext.aa_fallback).
    specs = [("_torch_ext", ["python/src/torch_ext.cpp"], cpp.CUDAExtension,
              ["-DAA_TORCH_EXT_CUDA=1"], cpp.CppExtension)]
    if srcs:
        specs.append(("_torch_native", srcs, cpp.CUDAExtension, [], None))
    for name, sources, kind, defines, plain in specs:
        try:
            ext = _make_ext(torch, cpp, kind, name, sources, defines)
        except Exception as e:  # e.g. no CUDA_HOME for CUDAExtension
            if plain is None:
                print("adaptalloc: cannot build adaptalloc.%s here (%s)" % (name, e))
                continue
            ext, plain = _make_ext(torch, cpp, plain, name, sources, []), None
        if plain is not None:
            ext.aa_fallback = _make_ext(torch, cpp, plain, name, sources, [])
        exts.append(ext)
    return exts


def _make_ext(torch, cpp, kind, name, sources, defines):
    ext = kind("adaptalloc." + name, sources)
    ext.include_dirs = INCLUDES + list(ext.include_dirs)
    ext.extra_compile_args = _torch_flags(torch, cpp, name) + list(defines)
    ext.libraries = ["adaptalloc"] + list(ext.libraries)
    ext.extra_link_args = ["-Wl,-rpath,$ORIGIN"]
    ext.language = "c++"
    return ext


class BuildExt(build_ext):
    """Runs CMake for libadaptalloc first, then builds the extensions
    against it and copies the libraries next to them."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = True  # the extensions build side by side

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
        jobs = os.environ.get("ADAPTALLOC_BUILD_JOBS") or str(os.cpu_count() or 2)
        subprocess.check_call(args, stdout=subprocess.DEVNULL if not self.verbose else None)
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
        plugin = os.path.join(bdir, "torch", "pluggable", PLUGIN)
        if cuda and os.path.exists(plugin):
            self._libs.append(plugin)
        for ext in self.extensions:
            ext.library_dirs = [bdir] + list(ext.library_dirs)

    def _parallel_compile(self, jobs):
        """Compiles an extension's sources in parallel (the torch headers
        make each C++ file take tens of seconds)."""
        orig = self.compiler.compile

        def compile_(sources, *args, **kwargs):
            if len(sources) <= 1 or jobs <= 1:
                return orig(sources, *args, **kwargs)
            with concurrent.futures.ThreadPoolExecutor(min(jobs, len(sources))) as ex:
                parts = list(ex.map(lambda src: orig([src], *args, **kwargs), sources))
            return [obj for objs in parts for obj in objs]

        self.compiler.compile = compile_

    def build_extensions(self):
        self._parallel_compile(int(os.environ.get("ADAPTALLOC_BUILD_JOBS") or
                                   os.cpu_count() or 2))
        # The package directory in build_lib (or the source tree for --inplace).
        pkgdir = os.path.dirname(self.get_ext_fullpath("adaptalloc._C"))
        os.makedirs(pkgdir, exist_ok=True)
        for lib in self._libs:
            # copyfile, not copy2: the real file under its soname.
            shutil.copyfile(os.path.realpath(lib), os.path.join(pkgdir, os.path.basename(lib)))
        super().build_extensions()

    def build_extension(self, ext):
        if ext.name in ("adaptalloc._torch_native", "adaptalloc._torch_ext"):
            try:
                super().build_extension(ext)
                return
            except Exception as e:
                err = e
            plain = getattr(ext, "aa_fallback", None)
            if plain is not None:
                print("adaptalloc: WARNING: %s did not build with CUDA's headers (%s); "
                      "building it without them (pinned_empty then takes the current "
                      "stream from Python)" % (ext.name, err), file=sys.stderr)
                # the same Extension object (setuptools keeps its own state
                # on it), with the plain build's settings
                for f in ("include_dirs", "libraries", "extra_compile_args",
                          "extra_link_args", "define_macros"):
                    setattr(ext, f, list(getattr(plain, f)))
                ext.library_dirs = [self._libdir] + list(plain.library_dirs)
                try:
                    super().build_extension(ext)
                    return
                except Exception as e:
                    err = e
            # The C package stays usable: install(native=True) then warns
            # and uses the pluggable fallback.
            print("adaptalloc: WARNING: %s did not build (%s); adaptalloc.torch works "
                  "without it (the pluggable allocator, tensors made in Python)"
                  % (ext.name, err), file=sys.stderr)
            return
        super().build_extension(ext)


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
exts += _torch_extensions()

setup(
    package_dir={"": "python"},
    packages=["adaptalloc", "adaptalloc.torch"],
    ext_modules=exts,
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
    options={"build": {"build_base": "build-py"}},
    zip_safe=False,
)
