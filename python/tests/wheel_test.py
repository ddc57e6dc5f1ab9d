"""The package installed the usual way for Python (ctest python_wheel_test): `pip wheel` builds a
wheel from python/ with the build folder's pstrain_core (PSTRAIN_BUILD_DIR, so nothing is compiled
twice), pip installs it into a venv made with --system-site-packages (Debian's NumPy and PyTorch),
and the venv's python, run outside the source tree without PYTHONPATH, imports it, type-checks
against it, and trains a real job with it.

Not named test_*.py: python_package_test's discovery leaves it out. Exits 77 (ctest's skip) when
Debian's pip, setuptools, wheel or venv are missing (scripts/install-deps.sh installs them).
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
BUILD_DIR = os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
EXAMPLES = os.path.join(SOURCE_DIR, "examples", "pytorch")
TRAIN, TEST = 2000, 500

# A worker_cmd that says which pstrain it imported, then runs the example script (its argv[1]) as
# `python script.py` would.
WORKER = """import os, runpy, sys
import pstrain
print("pstrain from " + pstrain.__file__, flush=True)
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# What the venv's python reports of the installed package.
PROBE = """import importlib.metadata, json, os
import pstrain, pstrain._core, pstrain.torch
package = os.path.dirname(pstrain.__file__)
print(json.dumps({
    "file": pstrain.__file__, "torch_file": pstrain.torch.__file__, "core_file": pstrain._core.__file__,
    "version": pstrain.__version__, "metadata_version": importlib.metadata.version("pstrain"),
    "requires": importlib.metadata.requires("pstrain"),
    "py_typed": os.path.exists(os.path.join(package, "py.typed")),
    "core_stub": os.path.exists(os.path.join(package, "_core.pyi")),
    "session_has_next": hasattr(pstrain.Session, "next"),
}))
"""

# A script a type checker reads against the installed package: one wrong call, two revealed types.
TYPED = """import pstrain
import pstrain.torch as pst

version: str = pstrain.__version__
member = pstrain.join(scheduler=1)
reveal_type(pst.Trainer.step)
reveal_type(member.new_session)
"""


def source_version():
    """The version written in python/pstrain/_version.py, the one place it is kept."""
    with open(os.path.join(SOURCE_DIR, "python", "pstrain", "_version.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)


def clean_env(**extra):
    """This process's environment without PYTHONPATH or the job variables pstrain reads."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PSTRAIN_")}
    env.update(extra)
    return env


def run(command, cwd, env=None, timeout=300):
    """(exit code, output) of `command`; prints how long it took."""
    start = time.monotonic()
    proc = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    what = " ".join([os.path.basename(command[0]), *command[1:3]]).splitlines()[0][:80]
    print(f"  [{what} ...: {time.monotonic() - start:.1f} s]", file=sys.stderr, flush=True)
    return proc.returncode, proc.stdout


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pstrain-wheel-")
        cls.version = source_version()
        cls.dist = os.path.join(cls.tmp, "dist")
        cls.venv = os.path.join(cls.tmp, "venv")
        cls.python = os.path.join(cls.venv, "bin", "python")
        code, out = run([sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w",
                         cls.dist, os.path.join(SOURCE_DIR, "python")], cls.tmp,
                        env=clean_env(PSTRAIN_BUILD_DIR=BUILD_DIR), timeout=600)
        cls.wheel_output = out
        cls.wheels = sorted(os.listdir(cls.dist)) if os.path.isdir(cls.dist) else []
        if code != 0 or len(cls.wheels) != 1:
            raise AssertionError(f"pip wheel exited {code} with {cls.wheels}:\n{out[-4000:]}")
        code, out = run([sys.executable, "-m", "venv", "--system-site-packages", cls.venv], cls.tmp)
        if code != 0:
            raise AssertionError(f"python3 -m venv exited {code}:\n{out[-4000:]}")
        # No index: the dependencies (numpy, and torch for the extra) must be Debian's, already there.
        wheel = os.path.join(cls.dist, cls.wheels[0])
        code, cls.install_output = run([cls.python, "-m", "pip", "install", "--no-index", f"{wheel}[torch]"], cls.tmp,
                                       env=clean_env())
        if code != 0:
            raise AssertionError(f"pip install exited {code}:\n{cls.install_output[-4000:]}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_wheel_is_built_from_the_build_folders_extension(self):
        self.assertRegex(self.wheels[0], rf"^pstrain-{re.escape(self.version)}-cp3\d+-cp3\d+-linux_\w+\.whl$")
        self.assertIn(f"building target pstrain_core in PSTRAIN_BUILD_DIR={BUILD_DIR}", self.wheel_output)
        self.assertNotIn("cmake configure", self.wheel_output, "PSTRAIN_BUILD_DIR given: nothing is configured")
        self.assertIn("Requirement already satisfied: numpy in /usr/lib/python3/dist-packages", self.install_output)
        self.assertIn("Requirement already satisfied: torch in /usr/lib/python3/dist-packages", self.install_output)

    def test_installed_package_imports_from_the_venv_outside_the_source_tree(self):
        code, out = run([self.python, "-c", PROBE], self.tmp, env=clean_env())
        self.assertEqual(code, 0, out)
        probe = json.loads(out.strip().splitlines()[-1])
        site = os.path.join(self.venv, "lib")
        for key in ("file", "torch_file", "core_file"):
            self.assertTrue(probe[key].startswith(site + os.sep), f"{key}: {probe[key]}, expected in {site}")
        self.assertRegex(os.path.basename(probe["core_file"]), r"^_core\.cpython-3\d+-.*\.so$")
        self.assertEqual(probe["version"], self.version)
        self.assertEqual(probe["metadata_version"], self.version)
        requires = sorted(r.replace(" ", "").replace("'", '"') for r in probe["requires"])
        self.assertEqual(requires, ["numpy", 'torch;extra=="torch"'])
        self.assertTrue(probe["py_typed"], "py.typed ships")
        self.assertTrue(probe["core_stub"], "_core.pyi ships")
        self.assertTrue(probe["session_has_next"])

    @unittest.skipIf(importlib.util.find_spec("mypy") is None, "mypy not installed (Debian: python3-mypy)")
    def test_type_checker_reads_the_installed_hints(self):
        script = os.path.join(self.tmp, "typed.py")
        with open(script, "w") as f:
            f.write(TYPED)
        # Under ctest, the build folder's mypy cache (MYPY_CACHE_DIR, python_mypy_test's too): what
        # mypy read of torch and numpy stays valid, and only the installed package and the script
        # are read afresh.
        cache = os.environ.get("MYPY_CACHE_DIR", os.path.join(self.tmp, "mypy"))
        code, out = run([self.python, "-m", "mypy", "--cache-dir", cache, script], self.tmp,
                        env=clean_env(), timeout=600)
        self.assertEqual(code, 1, out)  # the one wrong call
        self.assertNotIn("missing library stubs or py.typed marker", out)
        self.assertIn('typed.py:5: error: Argument "scheduler" to "join" has incompatible type "int"', out)
        self.assertRegex(out, r'typed.py:6: note: Revealed type is "def \(self: pstrain.torch.Trainer, loss: '
                              r'Union\[torch._tensor.Tensor, builtins.float\], scores: Any =, labels: Any =\) '
                              r'-> builtins.bool"')
        self.assertIn("-> pstrain._core.Session", out)
        self.assertIn("Found 1 error in 1 file", out)

    def test_job_trains_with_the_venvs_package(self):
        # The launcher puts <bin_dir>/../python in front of a worker's PYTHONPATH (the build tree's
        # package). A bin folder with no ../python beside it, as after `cmake --install`, leaves
        # the workers with the venv's package alone.
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir)
        for name in ("pstrain-scheduler", "pstrain-server"):
            os.symlink(os.path.join(BUILD_DIR, "bin", name), os.path.join(bin_dir, name))
        worker = os.path.join(self.tmp, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        summary_path = os.path.join(self.tmp, "summary.json")
        worker_cmd = " ".join([self.python, worker, os.path.join(EXAMPLES, "fashion_mlp.py"),
                               f"--train_limit={TRAIN}", f"--test_limit={TEST}"])
        code, out = run([os.path.join(BUILD_DIR, "bin", "pstrain-launch"), f"--bin_dir={bin_dir}", "--model=external",
                         "--servers=1", "--workers=2", "--epochs=1", f"--summary_json={summary_path}",
                         f"--worker_cmd={worker_cmd}"], self.tmp, env=clean_env(), timeout=300)
        self.assertEqual(code, 0, out[-4000:])
        installed = os.path.join(self.venv, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}",
                                 "site-packages", "pstrain", "__init__.py")
        for i in range(2):
            self.assertIn(f"[worker {i}] pstrain from {installed}\n", out)
        with open(summary_path) as f:
            summary = json.load(f)
        self.assertEqual(summary["state"], "FINISHED")
        self.assertEqual([e["samples"] for e in summary["epochs"]], [TRAIN])
        self.assertGreater(summary["final_test_accuracy"], 0.3, out[-2000:])  # it learned: chance is 0.1


def missing_tools():
    """What of pip, setuptools, wheel and venv (with its ensurepip) this python lacks."""
    return [name for name in ("pip", "setuptools", "wheel", "venv", "ensurepip")
            if importlib.util.find_spec(name) is None]


if __name__ == "__main__":
    missing = missing_tools()
    if missing:
        print(f"SKIP: {sys.executable} has no {', '.join(missing)} (run scripts/install-deps.sh: python3-pip "
              "python3-setuptools python3-wheel python3-venv)")
        sys.exit(77)
    unittest.main(verbosity=2)
