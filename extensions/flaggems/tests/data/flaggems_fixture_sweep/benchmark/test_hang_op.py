import time

import pytest
import torch

import flag_gems

from . import base, consts


def hang_op(x):
    """Under FlagGems' dispatch: a first call that never returns (a tuning sweep without end)."""
    if flag_gems.ACTIVE:
        time.sleep(3600)
    return torch.exp(x)


@pytest.mark.hang_op
def test_hang_op():
    bench = base.GenericBenchmark(op_name="hang_op", torch_op=hang_op, input_fn=base.unary_input_fn,
                                  dtypes=consts.FLOAT_DTYPES)
    bench.run()
