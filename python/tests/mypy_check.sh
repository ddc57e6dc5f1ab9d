#!/bin/sh
# The pstrain package's type hints: mypy with python/mypy.ini over python/pstrain (the modules and
# the stub of the compiled module, _core.pyi). `make test` runs it (ctest python_mypy_test, label
# lint); exits 77 (ctest reports a skip) where mypy is not installed (Debian's package mypy).
if ! command -v mypy >/dev/null 2>&1; then
  echo "mypy not found: skipped"
  exit 77
fi
python=$(cd "$(dirname "$0")/.." && pwd)
exec mypy --config-file "$python/mypy.ini" "$python/pstrain"
