"""Class 4, judge-owned record fields set by the worker: the candidate rewrites the worker's
``timed`` event so that the timing carries a forged speedup, baseline time, baseline timer,
distinct input sets, judge output and timer name. Honest twin: forges nothing. Both are slow."""
import torch

from _cheat import honest, work

if not honest():
    import sys

    _w = sys.modules["__main__"]  # the worker runs as ``python -m zlf_taskpkg.worker``

    _emit = _w.Worker.emit

    def emit(self, event, **fields):
        if event == "timed":
            timing = fields["timing"]
            timing["timer"] = "cupti"
            timing["extra"] = {**timing.get("extra", {}), "speedup": 40.0, "baseline_ms": 40 * timing["value_ms"],
                               "baseline_timer": "cupti", "distinct_input_sets": 4, "judge_output": "forged",
                               "verdict": "Accepted", "suspicious": []}
        return _emit(self, event, **fields)

    _w.Worker.emit = emit


def run_kernel(a, b, out, n):
    work(a, b, out)
