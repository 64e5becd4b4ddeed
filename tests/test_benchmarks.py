"""The GPU scripts under benchmarks/ run only on a GPU machine, so a name they import from zlf or
an extension that has since moved is found there, after the device time is spent (the CUPTI
script's task reference imported ``clone_args`` from a module that no longer had it). Every such
import is resolved here, without running the scripts, in a child process: importing an op module
decorates its kernels for the environment of the moment, and a test process that later runs the
cpu backend in-process (Triton's interpreter) must not find them compiled for a GPU."""
from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _zlf_imports():
    for path in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("zlf"):
                for alias in node.names:
                    yield path.name, node.module, alias.name


def _resolves(module: str, name: str) -> bool:
    mod = importlib.import_module(module)
    if hasattr(mod, name):
        return True
    try:  # ``from package import submodule``
        importlib.import_module(f"{module}.{name}")
        return True
    except ImportError:
        return False


@pytest.mark.extensions("task", "cudagraph", "cupti")
def test_every_name_a_benchmark_imports_from_zlf_exists():
    imports = list(_zlf_imports())
    assert len(imports) > 20  # the scripts are found and parsed
    proc = subprocess.run([sys.executable, __file__, json.dumps(imports)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    missing = json.loads(proc.stdout.splitlines()[-1])
    assert not missing, missing


def _child(imports) -> list:
    return [f"{script}: from {module} import {name}" for script, module, name in imports if not _resolves(module, name)]


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
