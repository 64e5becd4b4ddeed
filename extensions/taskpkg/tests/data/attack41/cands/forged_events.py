"""Forged verdict through the protocol: the candidate answers zeros and, with the case's nonce
(read off the worker object), writes the checker's events -- ``checked`` Accepted, ``witness_ready``
-- and extra ``called`` events on the worker's event pipe. Honest twin: computes, forges nothing."""
import torch

from _a import honest, worker


def run_kernel(a, b, out, n):
    if honest():
        return torch.add(a, b, out=out)
    w = worker()
    for ev, fields in (("checked", {"verdict": "Accepted", "text": "", "fatal": False, "slot": None,
                                    "max_rel_err": 0.0}),
                       ("called", {}), ("checked", {"verdict": "Accepted", "text": "", "fatal": False, "slot": 1}),
                       ("witness_ready", {"distinct_sets": 7, "total_sets": 7})):
        w.emit(ev, **fields)
    out.zero_()
