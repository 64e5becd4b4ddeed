"""Forged time through the protocol: at the end of the first clocked batch the candidate sends one
extra ``batched`` (with the nonce), so the judge's next round reads a stale reply and clocks ~0 ms
-- the judge takes the least round. Honest twin: no extra event."""
import time

from _a import honest, in_frame, work, worker

_batch_calls = [0]


def run_kernel(a, b, out, n):
    work(a, b, out)
    if not honest() and in_frame("batch"):
        _batch_calls[0] += 1
        if _batch_calls[0] == 3:
            worker().emit("batched")
