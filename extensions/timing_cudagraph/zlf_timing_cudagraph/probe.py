"""``--cudagraph-probe subprocess``: try a point's capture in a child process first.

A failed capture can leave a device's runtime or allocator in a state no in-process cleanup
repairs (after a failed capture the context is suspect). The child rebuilds the point from the
run's configuration (same extensions, backend, op source, timing; a :class:`zlf.config.RunConfig`
file) and the point (shape, dtype), captures two calls and checks one replay, and reports
``{"ok": true}`` or the reason on its last stdout line. Only points the child could capture are
captured in the parent.

Run as ``python -m zlf_timing_cudagraph.probe CONFIG.json`` with the point as JSON on stdin.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from zlf.procs import python_child_env

from .capture_errors import CaptureFailure

#: seconds a child may take (imports, compilation and autotuning of the op included).
PROBE_TIMEOUT_S = 600


def point_json(point) -> dict:
    """What the child needs besides the config to rebuild ``point``."""
    return {"op": point.op, "shape": list(point.shape), "dtype": point.dtype, "variant": getattr(point, "variant", "")}


def probe_in_child(config, point, timeout: float = PROBE_TIMEOUT_S) -> Optional[CaptureFailure]:
    """Ask a fresh process whether ``point`` of the run ``config`` describes can be captured:
    None if yes, else the failure."""
    if config is None:
        return CaptureFailure("probe_error", "capture probe: no run configuration to rebuild the point from")
    env = python_child_env(os.environ)
    env["ZLF_NO_PROGRESS"] = "1"
    with tempfile.TemporaryDirectory(prefix="zlf-probe-") as tmp:
        path = config.write(Path(tmp) / "config.json")
        try:
            proc = subprocess.run([sys.executable, "-m", "zlf_timing_cudagraph.probe", str(path)],
                                  input=json.dumps(point_json(point)), capture_output=True, text=True,
                                  timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return CaptureFailure("probe_error", f"capture probe took more than {timeout:.0f} s")
        except OSError as exc:
            return CaptureFailure("probe_error", f"capture probe could not start: {exc}")
    answer = None
    for line in reversed(proc.stdout.splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and "ok" in answer:
            break
        answer = None
    if answer is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return CaptureFailure("probe_error", f"capture probe exited {proc.returncode}: {tail[:200]}")
    if answer["ok"]:
        return None
    return CaptureFailure(answer.get("reason", "other"), answer.get("detail", ""))


def rebuild_point(config, p: dict):
    """The child's session, backend, op, point and inputs, from the config and the point."""
    from zlf.ops import point_inputs
    from zlf.records import Point
    from zlf.session import Session

    session = Session.open(config)
    backend = session.choose_backend(config.backend, config.device)
    ops = [op for op in session.resolve_ops(config.ops) if op.name == p["op"]]
    if not ops:
        raise LookupError(f"op {p['op']!r} not found from {list(config.ops)!r}")
    op = ops[0]
    point = Point(p["op"], tuple(p["shape"]), p["dtype"], p.get("variant", ""))
    return session, backend, op, point, point_inputs(op, point, backend)


def run_probe(config, p: dict) -> dict:
    """The child's side: rebuild the point, try to capture it, return the JSON answer."""
    from .graph_timer import probe_capture

    try:
        _, backend, op, point, inputs = rebuild_point(config, p)
    except LookupError as exc:
        return {"ok": False, "reason": "probe_error", "detail": str(exc).strip('"')}
    fn = lambda: op.fn(*inputs)  # noqa: E731 -- the same callable core times
    fn()
    backend.synchronize()
    failure = probe_capture(fn, backend, op=op, inputs=inputs, dtype=point.dtype)
    if failure is None:
        return {"ok": True}
    return {"ok": False, "reason": failure.reason, "detail": failure.detail}


def main(argv=None) -> int:
    from zlf.config import RunConfig

    argv = sys.argv[1:] if argv is None else argv
    try:
        answer = run_probe(RunConfig.read(argv[0]), json.load(sys.stdin))
    except Exception as exc:  # the parent turns this into reason=probe_error, never a crash
        answer = {"ok": False, "reason": "probe_error", "detail": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
