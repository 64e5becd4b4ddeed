"""As FlagGems v5.3.4's searchsorted, upsample_nearest_exact2d and index_put_impl: one op name
built by several tests (a dtype parameter; a test and its _out twin; two accumulate modes)."""
import pytest
import torch

from . import base, consts


class SortedSearchBenchmark(base.Benchmark):
    def set_shapes(self, shape_file_path=None):
        self.shapes = [((64,), (32,), False)]

    def get_input_iter(self, dtype):
        for seq, values, right in self.shapes:
            yield torch.arange(seq[0], device=self.device).to(dtype), \
                torch.arange(values[0], device=self.device).to(dtype), {"right": right}


@pytest.mark.sorted_search
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.int32)])
def test_sorted_search(dtype):
    bench = SortedSearchBenchmark(op_name="sorted_search", torch_op=torch.searchsorted, dtypes=[dtype])
    bench.run()


class DoubledBenchmark(base.Benchmark):
    def set_shapes(self, shape_file_path=None):
        self.shapes = [(2, 3, 4, 4)]

    def get_input_iter(self, dtype):
        for shape in self.shapes:
            yield torch.randn(shape, dtype=dtype, device=self.device), [shape[2] * 2, shape[3] * 2]


class DoubledOutBenchmark(DoubledBenchmark):
    def get_input_iter(self, dtype):
        for shape in self.shapes:
            out = torch.empty((shape[0], shape[1], shape[2] * 2, shape[3] * 2), dtype=dtype, device=self.device)
            yield torch.randn(shape, dtype=dtype, device=self.device), [shape[2] * 2, shape[3] * 2], {"out": out}


def doubled(x, size, out=None):
    y = torch.nn.functional.interpolate(x, size=size, mode="nearest")
    return y if out is None else out.copy_(y)


@pytest.mark.doubled
def test_doubled():
    bench = DoubledBenchmark(op_name="doubled", torch_op=doubled, dtypes=consts.FLOAT_DTYPES)
    bench.run()


@pytest.mark.doubled
def test_doubled_out():
    bench = DoubledOutBenchmark(op_name="doubled", torch_op=doubled, dtypes=consts.FLOAT_DTYPES)
    bench.run()


def put_input_fn(accumulate):
    def fn(shape, dtype, device):
        inp = torch.randn(shape, dtype=dtype, device=device)
        index = torch.randperm(shape[0], device=device)
        yield inp, (index,), torch.randn(shape, dtype=dtype, device=device), accumulate
    return fn


@pytest.mark.put_impl
def test_put_impl_acc_false():
    bench = base.GenericBenchmark(op_name="put_impl", torch_op=torch.index_put, input_fn=put_input_fn(False),
                                  dtypes=[torch.float32])
    bench.run()


@pytest.mark.put_impl
def test_put_impl_acc_true():
    bench = base.GenericBenchmark(op_name="put_impl", torch_op=torch.index_put, input_fn=put_input_fn(True),
                                  dtypes=[torch.float32])
    bench.run()
