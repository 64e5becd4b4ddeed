import pytest
import torch

from benchmark.attri_util import DEFAULT_METRICS, FLOAT_DTYPES, BenchLevel
from benchmark.conftest import Config
from benchmark.performance_utils import Benchmark


class BlasBenchmark(Benchmark):
    DEFAULT_METRICS = DEFAULT_METRICS[:] + ["tflops"]

    def __init__(self, *args, input_fn, **kwargs):
        super().__init__(*args, **kwargs)
        self.input_fn = input_fn

    def get_input_iter(self, cur_dtype):
        for b, m, n, k in self.shapes:
            yield from self.input_fn(b, m, n, k, cur_dtype, self.device, False)
        if Config.bench_level == BenchLevel.COMPREHENSIVE:
            for b, m, n, k in self.shapes:
                yield from self.input_fn(b, m, n, k, cur_dtype, self.device, True)

    def get_tflops(self, op, *args, **kwargs):
        return 2 * args[0].shape[0] * args[0].shape[1] * args[1].shape[1]


def mm_input_fn(b, m, n, k, cur_dtype, device, b_column_major):
    a = torch.randn([m, k], dtype=cur_dtype, device=device)
    if b_column_major:
        yield a, torch.randn([n, k], dtype=cur_dtype, device=device).t()
    else:
        yield a, torch.randn([k, n], dtype=cur_dtype, device=device)


@pytest.mark.parametrize(
    "op_name, torch_op, input_fn",
    [pytest.param("mm", torch.Tensor.mm, mm_input_fn, marks=pytest.mark.mm)],
)
def test_blas_benchmark(op_name, torch_op, input_fn):
    bench = BlasBenchmark(input_fn=input_fn, op_name=op_name, torch_op=torch_op, dtypes=FLOAT_DTYPES)
    bench.run()
