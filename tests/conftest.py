"""Shared fixtures: run zlf in-process or as a real subprocess; skip GPU tests without a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _env(extra=None):
    env = dict(os.environ)
    env.pop("FORCE_COLOR", None)
    env["ZLF_NO_PROGRESS"] = "1"
    env.update(extra or {})
    return env


@pytest.fixture
def zlf_cli(tmp_path):
    """Run ``python -m zlf ARGS`` in ``tmp_path`` as a fresh process; returns CompletedProcess."""

    def run(*args, env=None, cwd=None, timeout=600, check_rc=None):
        proc = subprocess.run(
            [sys.executable, "-m", "zlf", *map(str, args)],
            cwd=cwd or tmp_path, env=_env(env), capture_output=True, text=True, timeout=timeout,
        )
        if check_rc is not None:
            assert proc.returncode == check_rc, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return proc

    return run


def run_dir_from(stdout: str, cwd=None) -> Path:
    """The path on the ``run dir: <path>`` line a command prints last (joined to ``cwd``)."""
    lines = [l for l in stdout.splitlines() if l.startswith("run dir: ")]
    assert lines, f"no 'run dir:' line in:\n{stdout}"
    path = Path(lines[-1][len("run dir: "):])
    return path if path.is_absolute() or cwd is None else Path(cwd) / path


def read_records(run_dir: Path) -> list:
    return [json.loads(l) for l in (Path(run_dir) / "results.jsonl").read_text().splitlines() if l.strip()]


def zlf_seed_only(*args, cwd, env=None):
    """``python -m zlf ARGS`` in ``cwd`` with only the seed extension active and a private cache
    dir (ceilings); a module-level helper for module-scoped fixtures, which cannot use ``zlf_cli``."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    full_env.update({"ZLF_NO_PROGRESS": "1", "ZLF_EXTENSIONS": "seed", "ZLF_CACHE_DIR": str(Path(cwd) / "cache")})
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300)


class HeldDispatch:
    """An op environment like FlagGems' aten dispatch, for tests of ``Op.outside``: entered by
    the op's first call and held across calls; while held, aten's ``linalg_vector_norm`` on CPU
    refuses float64 (as FlagGems' kernel does), so zlf work done inside it fails loudly."""

    def __init__(self):
        self.lib = None
        self.entries = 0   # how often the op's call had to enter it

    def enter(self) -> None:
        import torch

        if self.lib is None:
            self.lib = torch.library.Library("aten", "IMPL")
            self.lib.impl("linalg_vector_norm", _refusing_vector_norm, "CPU")
            self.entries += 1

    def exit(self) -> None:
        if self.lib is not None:
            self.lib._destroy()
            self.lib = None

    def outside(self):
        import contextlib

        self.exit()  # the op's next call enters again
        return contextlib.nullcontext()


def _refusing_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if x.dtype.is_floating_point and x.element_size() == 8:
        raise NotImplementedError("vector_norm not implemented for torch.float64")
    raise NotImplementedError("held dispatch: vector_norm called")
