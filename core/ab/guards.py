"""What a campaign checks beside the statistics: that a switch is read at all, that the device
is idle, and the extensions' guards (``campaign_guards``)."""
from __future__ import annotations

import mmap
import os
import subprocess
import time
from pathlib import Path

from ..errors import UsageError


def _triton_dir(python: str) -> str:
    code = "import importlib.util,os;s=importlib.util.find_spec('triton');print(os.path.dirname(s.origin) if s and s.origin else '')"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def default_switch_sources(sides, ops) -> list:
    """Each side's installed Triton package and the op sources (built-in ops: zlf's ops module)."""
    paths = []
    for python in dict.fromkeys(s.interpreter for s in sides):
        d = _triton_dir(python)
        if d:
            paths.append(d)
    for op in ops:
        if op.source:
            paths.append(op.source)
        else:
            from ..ops import BUILTIN_OPS

            if op.name in BUILTIN_OPS:
                paths.append(str(Path(__file__).parent.parent / "ops" / "builtin.py"))
    return list(dict.fromkeys(paths))


def _files(paths):
    for p in paths:
        p = Path(p)
        if p.is_file():
            yield p
        elif p.is_dir():
            for root, _, names in os.walk(p):
                for n in sorted(names):
                    yield Path(root) / n


def find_references(name: str, paths, limit: int = 3) -> list:
    """Files under ``paths`` whose bytes contain ``name`` (compiled libraries included: Triton
    reads many switches from C++). At most ``limit`` hits."""
    needle, hits = name.encode(), []
    for f in _files(paths):
        try:
            with open(f, "rb") as fh:
                if os.fstat(fh.fileno()).st_size == 0:
                    continue
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    if m.find(needle) >= 0:
                        hits.append(str(f))
        except (OSError, ValueError):
            continue
        if len(hits) >= limit:
            break
    return hits


def switch_guard(sides, ops, sources=None, not_switches=()) -> list:
    """For each variable that differs between the sides: where it is referenced.

    :return: ``[{"name", "found": [files], "searched": [paths]}]``.
    """
    a, b = sides
    # ``not_switches`` (an extension's side variables) differ by design and are not read by the code under test
    keys = sorted(k for k in set(a.env) | set(b.env) if a.env.get(k) != b.env.get(k) and k not in not_switches)
    if not keys:
        return []
    searched = list(sources) if sources else default_switch_sources(sides, ops)
    return [{"name": k, "found": find_references(k, searched), "searched": searched} for k in keys]


def switch_guard_messages(results) -> list:
    return [f"switch {r['name']} is not referenced anywhere in {', '.join(r['searched']) or '(nothing searched)'}: "
            "both sides may run identical code (give --switch-source PATH if it is read elsewhere)"
            for r in results if not r["found"]]


def campaign_guards(campaign, reported_ops) -> list:
    """After the campaign: the extensions' guard lines (``campaign_guards``; e.g. whether side
    B's compiled code differs from side A's at all)."""
    if campaign.hooks is None or campaign.aa:
        return []
    return campaign.hooks.campaign_guards(campaign=campaign, ops=list(reported_ops))


def busy_backend(session, backend_name, device):
    """The backend object whose ``busy_warnings()`` guards --require-idle, never set up here
    (the campaign process must not hold the GPU it is measuring)."""
    known = session.backends()
    name = backend_name or os.environ.get("ZLF_BACKEND")
    if name:
        if name not in known:
            raise UsageError(f"unknown backend {name!r}; known: {', '.join(sorted(known))}")
        cls = known[name]
    else:
        available = [c for c in known.values() if c.is_available()]
        cls = max(available, key=lambda c: c.priority)
    return cls(device)


def wait_until_idle(backend, wait_s: float, poll_s: float = 5.0) -> list:
    """``[]`` once the device is idle, or the last warnings after ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        warnings = backend.busy_warnings()
        if not warnings or time.monotonic() >= deadline:
            return warnings
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


