"""As FlagGems v5.3.4's cholesky_solve_out: complex64 and complex128 among the dtypes, an out=
buffer made with torch.empty_like."""
import pytest
import torch

from . import base


class ComplexSolveOutBenchmark(base.Benchmark):
    def set_shapes(self, shape_file_path=None):
        self.shapes = [(4, 8, 8)]

    def get_input_iter(self, cur_dtype):
        for shape in self.shapes:
            rhs = torch.randn(shape, dtype=cur_dtype, device=self.device)
            factor = torch.randn(shape, dtype=cur_dtype, device=self.device)
            yield rhs, factor, {"out": torch.empty_like(rhs)}


@pytest.mark.complex_solve_out
def test_complex_solve_out():
    bench = ComplexSolveOutBenchmark(op_name="complex_solve_out", torch_op=torch.mul,
                                     dtypes=[torch.float32, torch.float64, torch.complex64, torch.complex128])
    bench.run()
