import pytest
import torch

import flag_gems

from . import base, consts


def flaky_exp(x):
    """Under FlagGems' dispatch this stands for a kernel that fails on large inputs."""
    if flag_gems.ACTIVE and x.numel() > 100_000:
        raise RuntimeError(f"fixture gems kernel: out of resources for {x.numel()} elements")
    return torch.exp(x)


@pytest.mark.flaky_exp
def test_flaky_exp():
    bench = base.GenericBenchmark(op_name="flaky_exp", torch_op=flaky_exp, input_fn=base.unary_input_fn,
                                  dtypes=consts.FLOAT_DTYPES)
    bench.run()
