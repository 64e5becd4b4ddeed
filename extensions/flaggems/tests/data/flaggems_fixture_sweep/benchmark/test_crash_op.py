import os

import pytest
import torch

import flag_gems

from . import base, consts


def crash_op(x):
    """Under FlagGems' dispatch: a kernel that takes the process down (a segfault's exit)."""
    if flag_gems.ACTIVE:
        os._exit(139)
    return torch.exp(x)


@pytest.mark.crash_op
def test_crash_op():
    bench = base.GenericBenchmark(op_name="crash_op", torch_op=crash_op, input_fn=base.unary_input_fn,
                                  dtypes=consts.FLOAT_DTYPES)
    bench.run()
