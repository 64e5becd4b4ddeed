"""A FlagGems op whose first call per point is slow (a compile), the later ones fast."""
import time

import pytest
import torch

import flag_gems

from . import base

SEEN = set()


def slow_first_call(x):
    key = (tuple(x.shape), x.dtype)
    if flag_gems.ACTIVE and key not in SEEN:
        SEEN.add(key)
        time.sleep(4)  # "compiling": past a 1 s --time-limit and its 2 s grace (the watchdog)
    return torch.exp(x)


class SlowFirstCallBenchmark(base.GenericBenchmark):
    def set_shapes(self, shape_file_path=None):
        self.shapes = [(64, 64)]


@pytest.mark.slow_first_call
def test_slow_first_call():
    bench = SlowFirstCallBenchmark(op_name="slow_first_call", torch_op=slow_first_call, input_fn=base.unary_input_fn,
                                   dtypes=[torch.float32])
    bench.run()
