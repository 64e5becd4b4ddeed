"""FlagGems' second tuning layer: ``libtuner``'s persistent sqlite cache and ``libentry``'s launchers.

* ``shared`` leaves ``FLAGGEMS_DB_URL`` alone: winners tuned by an earlier process (possibly under
  another compiler build -- the cache does not key on it) are reused, so both sides of an A/B run
  the same winner.
* ``fresh`` points ``FLAGGEMS_DB_URL`` at a throwaway sqlite file before flag_gems is imported
  (FlagGems reads it at import), so each process tunes for itself. The run directory does not
  exist yet at that time: the file lives in a temporary directory and is copied into the run
  directory as ``libtuner_cache.db`` at the end of the run (also after a crash of a point; a hard
  kill loses it).

``libentry`` caches one launcher per argument signature and calls it directly after the first
call, so the autotuner (and anything pinned in it) is consulted only on that first call. zlf
pins from ``before_run`` on; :func:`clear_libentry_launchers` empties launchers filled before
that (at import time), so their next call goes through the pinned tuner again.
"""
from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

ENV_DB_URL = "FLAGGEMS_DB_URL"
KEPT_AS = "libtuner_cache.db"
MODES = ("shared", "fresh")
DEFAULT_LOCATION = "FlagGems default: ~/.flaggems/config_cache/TunedConfig_<device>_triton_<major>_<minor>.db"


class LibtunerCache:
    """The chosen mode, the URL FlagGems will read, and (fresh) the throwaway file."""

    def __init__(self, mode: str):
        self.mode = mode
        self.user_url: Optional[str] = os.environ.get(ENV_DB_URL)
        self._tmpdir: Optional[str] = None
        self.db_path: Optional[Path] = None
        self.kept: Optional[str] = None

    def apply(self) -> None:
        """Set the environment; must run before flag_gems is imported."""
        if self.mode != "fresh":
            return
        self._tmpdir = tempfile.mkdtemp(prefix="zlf-libtuner-")
        atexit.register(shutil.rmtree, self._tmpdir, True)
        self.db_path = Path(self._tmpdir) / "libtuner.db"
        os.environ[ENV_DB_URL] = f"sqlite:///{self.db_path}"

    @property
    def url(self) -> str:
        return os.environ.get(ENV_DB_URL) or DEFAULT_LOCATION

    def keep(self, run_dir: Path) -> None:
        """Copy the throwaway cache into the run directory (fresh mode, when FlagGems wrote one)."""
        if self.db_path is None or not self.db_path.is_file() or self.db_path.stat().st_size == 0:
            return
        shutil.copyfile(self.db_path, run_dir / KEPT_AS)
        self.kept = KEPT_AS

    def describe(self) -> dict:
        d = {"libtuner_cache": self.mode, "libtuner_db_url": self.url,
             "flag_gems_imported": "flag_gems" in sys.modules}
        if self.mode == "fresh":
            d["libtuner_db_kept_as"] = self.kept
            d["libtuner_note"] = (
                "fresh: FLAGGEMS_DB_URL pointed at a throwaway sqlite file in a temporary directory "
                "before any import (the run directory did not exist yet); copied here as "
                f"{KEPT_AS} at the end of the run when FlagGems wrote to it, then deleted"
            )
            if self.user_url and self.user_url != self.url:
                d["libtuner_user_db_url_ignored"] = self.user_url
        else:
            d["libtuner_note"] = "shared: FlagGems' own persistent cache, winners reused across processes and builds"
        return d


def clear_libentry_launchers() -> int:
    """Empty the launcher caches of every FlagGems ``LibEntry``; returns how many were non-empty.

    Only runs when ``flag_gems.utils.libentry`` is imported (a scan of live objects, once).
    """
    module = sys.modules.get("flag_gems.utils.libentry")
    cls = getattr(module, "LibEntry", None)
    if cls is None:
        return 0
    cleared = 0
    for obj in gc.get_objects():
        if not isinstance(obj, cls):
            continue
        caches = list(getattr(obj, "kernel_cache", ()) or ())
        if isinstance(getattr(obj, "_cpu_cache", None), dict):
            caches.append(obj._cpu_cache)
        for cache in caches:
            if cache:
                cache.clear()
                cleared += 1
    return cleared
