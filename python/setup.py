"""Builds the extension pstrain._core for the wheel with the project's CMake (python/CMakeLists.txt,
target pstrain_core) instead of setuptools' compiler; pyproject.toml holds everything else.

    PSTRAIN_BUILD_DIR=<a configured build folder>   build the target there and take
                                                    <build>/python/pstrain/_core*.so
    unset                                           configure <repo>/build-python (Release, no CUDA,
                                                    for this interpreter) and build the target there

cmake --build runs CMAKE_BUILD_PARALLEL_LEVEL jobs when that is set, else one per core. pip shows
this script's progress lines with -v.
"""

import os
import shutil
import subprocess
import sys
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import ExecError

PYTHON_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(PYTHON_DIR)
INSTALL_DEPS = "scripts/install-deps.sh"


def _log(message):
    print(f"pstrain: {message}", file=sys.stderr, flush=True)


def _run(command, what):
    _log(" ".join(command))
    start = time.monotonic()
    if subprocess.call(command) != 0:
        raise ExecError(f"{what} failed (the lines above say why); missing -dev packages? Run {INSTALL_DEPS}")
    _log(f"{what}: {time.monotonic() - start:.0f} s")


def _cache_value(build_dir, name):
    """The value of `name` in build_dir's CMakeCache.txt; None when the cache has no such entry."""
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            if key.split(":")[0] == name:
                return value
    return None


def _build_dir():
    """(the CMake build folder, whether PSTRAIN_BUILD_DIR named it)."""
    build_dir = os.environ.get("PSTRAIN_BUILD_DIR", "")
    if not build_dir:
        return os.path.join(SOURCE_DIR, "build-python"), False
    if not os.path.isabs(build_dir):
        # pip runs this script in python/, not where the command was typed.
        raise SystemExit(f"pstrain: PSTRAIN_BUILD_DIR={build_dir} is relative; give an absolute path "
                         "(PSTRAIN_BUILD_DIR=$PWD/build)")
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        raise SystemExit(f"pstrain: PSTRAIN_BUILD_DIR={build_dir} is not a configured build folder (no CMakeCache.txt)")
    home = _cache_value(build_dir, "CMAKE_HOME_DIRECTORY")
    if home is None or os.path.realpath(home) != os.path.realpath(SOURCE_DIR):
        raise SystemExit(f"pstrain: PSTRAIN_BUILD_DIR={build_dir} is the build folder of {home}, not of {SOURCE_DIR}")
    return build_dir, True


BUILD_DIR, BUILD_DIR_GIVEN = _build_dir()


class CMakeBuildExt(build_ext):
    """build_ext for the one extension, pstrain._core: CMake builds it, this copies it in."""

    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            raise ExecError(f"cmake not found: run {INSTALL_DEPS} (cmake, the compilers and the -dev packages)")
        build_dir = BUILD_DIR
        if BUILD_DIR_GIVEN:
            _log(f"building target pstrain_core in PSTRAIN_BUILD_DIR={build_dir}")
        else:
            _log(f"configuring {build_dir} (no PSTRAIN_BUILD_DIR)")
            _run(["cmake", "-S", SOURCE_DIR, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DPSTRAIN_CUDA=OFF",
                  f"-DPSTRAIN_PYTHON={sys.executable}"], "cmake configure")
        package_dir = os.path.join(build_dir, "python", "pstrain")
        if not os.path.isdir(package_dir):
            # python/CMakeLists.txt returns before laying out the package when these are missing.
            raise ExecError(f"the configure of {build_dir} found no pybind11 or Python headers: run {INSTALL_DEPS} "
                            "(pybind11-dev, python3-dev), then build again")
        command = ["cmake", "--build", build_dir, "--target", "pstrain_core"]
        if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            command += ["-j", str(os.cpu_count() or 1)]
        _run(command, "cmake --build (target pstrain_core)")

        target = self.get_ext_fullpath(ext.name)
        built = os.path.join(package_dir, os.path.basename(target))
        if not os.path.exists(built):
            found = sorted(f for f in os.listdir(package_dir) if f.startswith("_core"))
            raise ExecError(
                f"{package_dir} has {found or 'no _core module'}, expected {os.path.basename(target)} for "
                f"{sys.executable}: that build folder is configured for another Python (its PSTRAIN_PYTHON); "
                "unset PSTRAIN_BUILD_DIR or point it at a build for this interpreter")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(built, target)
        _log(f"{built} -> {target}")


# setuptools' own build folders (build/, pstrain.egg-info) go into the CMake build folder, not the
# source tree.
SETUPTOOLS_DIR = os.path.join(BUILD_DIR, "python-setuptools")
os.makedirs(SETUPTOOLS_DIR, exist_ok=True)
setup(ext_modules=[Extension("pstrain._core", sources=[])], cmdclass={"build_ext": CMakeBuildExt},
      options={"build": {"build_base": SETUPTOOLS_DIR}, "egg_info": {"egg_base": SETUPTOOLS_DIR}})
