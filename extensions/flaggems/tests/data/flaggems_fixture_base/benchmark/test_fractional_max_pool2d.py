import pytest
import torch

from . import base, consts


def fractional_max_pool2d(x):
    """As the real op: pooling regions drawn per call (here: a random scale), on either side."""
    return x * torch.rand(1).item()


@pytest.mark.fractional_max_pool2d
def test_fractional_max_pool2d():
    bench = base.GenericBenchmark(op_name="fractional_max_pool2d", torch_op=fractional_max_pool2d,
                                  input_fn=base.unary_input_fn, dtypes=consts.FLOAT_DTYPES)
    bench.run()
