"""``--cudagraph-probe subprocess``: try a point's capture in a child process first.

A failed capture can leave a device's runtime or allocator in a state no in-process cleanup
repairs (after a failed capture the context is suspect). The child rebuilds the
point from the same command line (same extensions, backend, op source, shape, dtype), captures
two calls and checks one replay, and reports ``{"ok": true}`` or the reason on its last stdout
line. Only points the child could capture are captured in the parent.

Run as ``python -m zlf_timing_cudagraph.probe`` with the request as JSON on stdin.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Optional

from zlf.records import jsonable_options

from .capture_errors import CaptureFailure

#: seconds a child may take (imports, compilation and autotuning of the op included).
PROBE_TIMEOUT_S = 600


def request_for(options, point) -> dict:
    """What the child needs to rebuild ``point``: the parsed options (JSON-able ones) and the point."""
    opts = jsonable_options(options)
    return {"options": opts, "point": {"op": point.op, "shape": list(point.shape), "dtype": point.dtype,
                                       "variant": getattr(point, "variant", "")}}


def probe_in_child(options, point, timeout: float = PROBE_TIMEOUT_S) -> Optional[CaptureFailure]:
    """Ask a fresh process whether ``point`` can be captured: None if yes, else the failure."""
    env = dict(os.environ)
    env["ZLF_NO_PROGRESS"] = "1"
    try:
        proc = subprocess.run([sys.executable, "-m", "zlf_timing_cudagraph.probe"],
                              input=json.dumps(request_for(options, point)), capture_output=True, text=True,
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


def run_probe(request: dict) -> dict:
    """The child's side: rebuild the point, try to capture it, return the JSON answer."""
    from zlf.records import Point
    from zlf.session import Session

    from .graph_timer import probe_capture

    options = argparse.Namespace(**request["options"])
    session = Session.create(options)
    session.options = options
    session.hooks.configure(session)
    backend = session.choose_backend(getattr(options, "backend", None), getattr(options, "device", 0) or 0)
    p = request["point"]
    ops = [op for op in session.resolve_ops(getattr(options, "ops", None) or None) if op.name == p["op"]]
    if not ops:
        return {"ok": False, "reason": "probe_error", "detail": f"op {p['op']!r} not found from {options.ops!r}"}
    op = ops[0]
    point = Point(p["op"], tuple(p["shape"]), p["dtype"], p.get("variant", ""))
    inputs = session.hooks.make_inputs(op, point, backend)
    fn = lambda: op.fn(*inputs)  # noqa: E731 -- the same callable core times
    fn()
    backend.synchronize()
    failure = probe_capture(fn, backend, op=op, inputs=inputs, dtype=point.dtype)
    if failure is None:
        return {"ok": True}
    return {"ok": False, "reason": failure.reason, "detail": failure.detail}


def main() -> int:
    request = json.load(sys.stdin)
    try:
        answer = run_probe(request)
    except Exception as exc:  # the parent turns this into reason=probe_error, never a crash
        answer = {"ok": False, "reason": "probe_error", "detail": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
