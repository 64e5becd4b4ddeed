"""Ops for zlf's reference check: under FlagGems' dispatch (``flag_gems.ACTIVE``) some of them
stand for wrong kernels."""
import pytest
import torch

import flag_gems
from benchmark.attri_util import FLOAT_DTYPES
from benchmark.performance_utils import GenericBenchmark, generate_tensor_input, unary_input_fn


def wrong_exp(x):
    """A FlagGems kernel 1% off."""
    return torch.exp(x) * (1.01 if flag_gems.ACTIVE else 1.0)


def lazy_abs(x, *, out):
    """A FlagGems kernel that leaves the second half of its output unwritten."""
    n = out.shape[0] // 2 if flag_gems.ACTIVE else out.shape[0]
    torch.abs(x[:n], out=out[:n])
    return out


def max_dim(x):
    return torch.max(x, dim=-1)  # (values, indices)


def out_input_fn(shape, dtype, device):
    inp = generate_tensor_input(shape, dtype, device)
    yield inp, {"out": torch.empty(shape, dtype=dtype, device=device)}


def inplace_input_fn(shape, dtype, device):
    yield generate_tensor_input(shape, dtype, device), generate_tensor_input(shape, dtype, device)


@pytest.mark.parametrize("op_name, torch_op, input_fn, inplace", [
    pytest.param("wrong_exp", wrong_exp, unary_input_fn, False, marks=pytest.mark.wrong_exp),
    pytest.param("lazy_abs", lazy_abs, out_input_fn, False, marks=pytest.mark.lazy_abs),
    pytest.param("log", torch.log, unary_input_fn, False, marks=pytest.mark.log),  # NaN for x < 0, both sides
    pytest.param("max_dim", max_dim, unary_input_fn, False, marks=pytest.mark.max_dim),
    pytest.param("add_", torch.Tensor.add_, inplace_input_fn, True, marks=pytest.mark.add_),
    pytest.param("rand_like", torch.rand_like, unary_input_fn, False, marks=pytest.mark.rand_like),
])
def test_checked_perf(op_name, torch_op, input_fn, inplace):
    bench = GenericBenchmark(op_name=op_name, torch_op=torch_op, input_fn=input_fn, dtypes=FLOAT_DTYPES,
                             is_inplace=inplace)
    bench.run()
