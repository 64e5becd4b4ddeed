"""Forged work: the judge's "never-seen" input sets are predictable (seeds base_seed + case +
i * 1000003, the package's source readable, worker.json names both). At the first call the
candidate regenerates every set the judge will use (0..15) with the judge's own seeding, runs
the package's baseline on each (off the clock), and afterwards answers from that table, copying
(0.5 ms a call: fast, but not "suspiciously" fast). Honest twin: 20 ms of work a call."""
import time

import torch

from _a import honest, spec, work

_table = {}


def _key(a):
    return a[:8].numpy().tobytes()


def _build():
    from zlf.seeding import seed_everything
    from zlf_taskpkg.checker import SET_SEED_STRIDE, clone_args, offset_seeds
    from zlf_taskpkg.package import TaskPackage

    s = spec()
    pkg = TaskPackage.open(s["package"])
    prob = pkg.load()
    for k in range(1, prob.getNumOfTestcases() + 1):
        arg_shapes = pkg.case_sizes(k)[1]
        for i in range(16):
            seed_everything(s["base_seed"] + k + i * SET_SEED_STRIDE)
            with offset_seeds(i * SET_SEED_STRIDE):
                args = list(prob.genTestCase(arg_shapes, device="cpu"))
            want = clone_args(args)
            prob.baseline(*want)
            _table[_key(args[0])] = want[2].clone()


def run_kernel(a, b, out, n):
    if honest():
        return work(a, b, out)
    if not _table:
        _build()
    hit = _table.get(_key(a))
    if hit is None:
        return work(a, b, out)
    time.sleep(0.0005)
    out.copy_(hit)
