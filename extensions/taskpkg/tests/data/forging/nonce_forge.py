"""Finds the worker object of its own process (gc), and sends an "Accepted, fast" result through
it -- with the case's nonce -- then writes garbage."""
import gc

from _common import HONEST, compute


def run_kernel(a, b, out, n):
    worker = next((o for o in gc.get_objects() if type(o).__name__ == "Worker" and hasattr(o, "emit")), None)
    if HONEST:
        compute(a, b, out)
        return
    if worker is not None:
        worker.emit("result", verdict="Accepted", text="",
                    timing={"value_ms": 1e-6, "timer": "host_wall", "samples_ms": [1e-6]})
    out.zero_()
