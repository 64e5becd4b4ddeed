import pytest
import torch

import flag_gems
from benchmark.attri_util import FLOAT_DTYPES
from benchmark.performance_utils import Benchmark, GenericBenchmark, generate_tensor_input, unary_input_fn, vendor_name
from flag_gems.utils import shape_utils


class UnaryReductionBenchmark(Benchmark):
    def set_more_metrics(self):
        return ["gbps"]

    def get_gbps(self, args, latency):
        return 2 * shape_utils.size_in_bytes(args[0]) * 1e-9 / (latency * 1e-3)

    def set_more_shapes(self):
        return [(1024, 2**i) for i in (4, 8)]

    def get_input_iter(self, cur_dtype):
        for shape in self.shapes:
            inp = generate_tensor_input(shape, cur_dtype, self.device)
            yield (inp, 1) if inp.ndim > 1 else (inp,)


forward_operations = [
    ("softmax", torch.nn.functional.softmax, FLOAT_DTYPES),
    ("sum", torch.sum, FLOAT_DTYPES),
]


@pytest.mark.parametrize(
    "op_name, torch_op, dtypes",
    [pytest.param(name, op, dtype, marks=getattr(pytest.mark, name)) for name, op, dtype in forward_operations],
)
def test_general_reduction_perf(op_name, torch_op, dtypes):
    bench = UnaryReductionBenchmark(op_name=op_name, torch_op=torch_op, dtypes=dtypes)
    bench.run()


def flaky_exp(x):
    """Under FlagGems' dispatch this stands for a kernel that fails on large inputs."""
    if flag_gems.ACTIVE and x.numel() > 100_000:
        raise RuntimeError(f"fixture gems kernel: out of resources for {x.numel()} elements")
    return torch.exp(x)


@pytest.mark.flaky_exp
def test_flaky_exp_perf():
    bench = GenericBenchmark(op_name="flaky_exp", torch_op=flaky_exp, input_fn=unary_input_fn, dtypes=FLOAT_DTYPES)
    bench.run()


@pytest.mark.skipif(vendor_name == "fixture", reason="fixture: not on this vendor")
@pytest.mark.never_here
def test_never_here_perf():
    bench = GenericBenchmark(op_name="never_here", torch_op=torch.abs, input_fn=unary_input_fn)
    bench.run()
