"""As FlagGems v5.3.4's max_pool2d_with_indices_backward: the input function makes the indices
with the FlagGems forward kernel (``flag_gems.max_pool2d_with_indices``)."""
import pytest
import torch

import flag_gems

from . import base


class MaxPool2dBenchmark(base.GenericBenchmark):
    def set_shapes(self, shape_file_path=None):
        self.shapes = [(2, 3, 8, 8)]


def max_pool2d_with_indices_backward_input_fn(shape, dtype, device):
    inp = torch.randn(shape, dtype=dtype, device=device)
    output, indices = flag_gems.max_pool2d_with_indices(inp, 2)
    yield torch.randn_like(output), inp, 2, indices


def torch_wrapper(grad_output, input, kernel_size, indices):
    _, torch_indices = torch.ops.aten.max_pool2d_with_indices(input, [kernel_size] * 2)
    return torch.ops.aten.max_pool2d_with_indices_backward(
        grad_output, input, [kernel_size] * 2, [kernel_size] * 2, [0, 0], [1, 1], False, torch_indices)


def gems_wrapper(grad_output, input, kernel_size, indices):
    return torch.ops.aten.max_pool2d_with_indices_backward(
        grad_output, input, [kernel_size] * 2, [kernel_size] * 2, [0, 0], [1, 1], False, indices)


@pytest.mark.max_pool2d_with_indices_backward
def test_max_pool2d_with_indices_backward():
    bench = MaxPool2dBenchmark(input_fn=max_pool2d_with_indices_backward_input_fn,
                               op_name="max_pool2d_with_indices_backward", torch_op=torch_wrapper,
                               dtypes=[torch.float32], is_backward=False)
    bench.set_gems(gems_wrapper)
    bench.run()


class FixedPoolBenchmark(base.Benchmark):
    """Inputs of its own choosing (zlf's ``fixed`` kind), indices from the FlagGems forward."""

    def get_input_iter(self, dtype):
        for shape in [(1, 2, 4, 4), (2, 2, 8, 8)]:
            inp = torch.randn(shape, dtype=dtype, device=self.device)
            output, indices = flag_gems.max_pool2d_with_indices(inp, 2)
            yield torch.randn_like(output), inp, 2, indices


@pytest.mark.fixed_pool
def test_fixed_pool():
    bench = FixedPoolBenchmark(op_name="fixed_pool", torch_op=torch_wrapper, dtypes=[torch.float32])
    bench.set_gems(gems_wrapper)
    bench.run()
