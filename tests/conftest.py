"""Core's tests: the fixtures come from zlf.testing (a pytest plugin installed with zlf); the
names below keep ``from conftest import ...`` working in core's test files."""
from __future__ import annotations

from pathlib import Path

from zlf.testing import HeldDispatch, clean_env as _env, gpu_available, read_records, run_dir_from, run_zlf  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def zlf_seed_only(*args, cwd, env=None):
    """``python -m zlf ARGS`` in ``cwd`` with only the seed extension active and a private cache
    dir (ceilings); a module-level helper for module-scoped fixtures, which cannot use ``zlf_cli``."""
    full_env = {"ZLF_EXTENSIONS": "seed", "ZLF_CACHE_DIR": str(Path(cwd) / "cache")}
    full_env.update(env or {})
    return run_zlf(*args, cwd=cwd, env=full_env, timeout=300)
