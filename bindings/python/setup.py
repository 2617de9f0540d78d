"""Builds the `_sessionturn` extension with the project's CMake build (the C++ library and its
dependencies come from the repository root, two directories up), then packages it with the facade.

    pip install --no-build-isolation ./bindings/python

Environment: SESSIONTURN_CMAKE_ARGS (extra CMake arguments), SESSIONTURN_BUILD_DIR (a build directory
to use instead of a temporary one; one that is already configured is only built, not reconfigured), SESSIONTURN_JOBS (parallel jobs, default 2)."""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            raise RuntimeError("sessionturn: the repository root (%s) is needed to build the extension" % ROOT)
        reuse = os.environ.get("SESSIONTURN_BUILD_DIR")
        build_dir = os.path.abspath(reuse) if reuse else os.path.join(os.path.abspath(self.build_temp), "cmake")
        os.makedirs(build_dir, exist_ok=True)
        if reuse and os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            # An existing configured build (e.g. the developer's): build the module, keep its settings.
            self._build(build_dir, ext)
            return
        args = [
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DSESSIONTURN_BUILD_PYTHON=ON",
            "-DSESSIONTURN_BUILD_TESTS=OFF",
            # The examples' bridge libraries go into the module (python -m sessionturn.telegram); only what
            # _sessionturn needs is built.
            "-DSESSIONTURN_BUILD_EXAMPLES=ON",
            "-DPYTHON_EXECUTABLE=" + sys.executable,
        ]
        try:
            import pybind11  # Debian's python3-pybind11: found offline, no download

            args.append("-Dpybind11_DIR=" + pybind11.get_cmake_dir())
        except ImportError:
            pass  # pybind11-dev's CMake package may still be found
        args += shlex.split(os.environ.get("SESSIONTURN_CMAKE_ARGS", ""))
        if subprocess.call(args) != 0:
            # The bridges need CLI11 and yaml-cpp; without them the package is built without
            # `python -m sessionturn.telegram/.slack` (they say so), everything else the same.
            print("sessionturn: configuring with the bridges failed; building without them", file=sys.stderr)
            shutil.rmtree(build_dir, ignore_errors=True)
            os.makedirs(build_dir, exist_ok=True)
            args = [a if a != "-DSESSIONTURN_BUILD_EXAMPLES=ON" else "-DSESSIONTURN_BUILD_EXAMPLES=OFF" for a in args]
            subprocess.check_call(args)
        self._build(build_dir, ext)

    def _build(self, build_dir, ext):
        jobs = os.environ.get("SESSIONTURN_JOBS", "2")
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_sessionturn", "-j", jobs])
        built = glob.glob(os.path.join(build_dir, "python", "sessionturn", "_sessionturn*.so"))
        if not built:
            raise RuntimeError("sessionturn: the CMake build produced no _sessionturn module in " + build_dir)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[CMakeExtension("sessionturn._sessionturn")], cmdclass={"build_ext": CMakeBuild})
