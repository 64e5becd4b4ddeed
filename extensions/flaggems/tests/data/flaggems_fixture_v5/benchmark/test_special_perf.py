import pytest
import torch

from benchmark.attri_util import FLOAT_DTYPES
from benchmark.performance_utils import Benchmark, GenericBenchmark, generate_tensor_input


class AvgPool2dBenchmark(GenericBenchmark):
    """Shapes hard-coded inside get_input_iter (core_shapes.yaml is not read for them)."""

    def get_input_iter(self, cur_dtype):
        shapes_4d = [(2, 3, 32, 32), (4, 8, 16, 16)]
        for shape in shapes_4d:
            yield from self.input_fn(shape, cur_dtype, self.device)


def avg_pool2d_input_fn(shape, dtype, device):
    yield generate_tensor_input(shape, dtype, device), {"kernel_size": 3, "stride": 2, "padding": 1}


@pytest.mark.avg_pool2d
def test_avg_pool2d_perf():
    bench = AvgPool2dBenchmark(input_fn=avg_pool2d_input_fn, op_name="avg_pool2d",
                               torch_op=torch.nn.functional.avg_pool2d, dtypes=FLOAT_DTYPES)
    bench.run()


def softmax_topk(gating, k, renormalize):
    weights, ids = torch.topk(torch.softmax(gating.float(), dim=-1), k, dim=-1)
    return weights / weights.sum(-1, keepdim=True) if renormalize else weights


class SoftmaxTopKBenchmark(Benchmark):
    """set_shapes overridden with a built-in config list; two inputs per config."""

    def set_shapes(self, shape_file_path=None):
        self.shapes = [(64, 16, 4), (128, 32, 8)]  # (num_tokens, num_experts, topk)

    def get_input_iter(self, cur_dtype):
        for tokens, experts, k in self.shapes:
            gating = torch.randn(tokens, experts, dtype=cur_dtype, device=self.device)
            for renormalize in (False, True):
                yield gating, k, renormalize


@pytest.mark.softmax_topk
def test_softmax_topk_perf():
    bench = SoftmaxTopKBenchmark(op_name="softmax_topk", torch_op=softmax_topk, dtypes=[torch.float32])
    bench.run()


class UpsampleBicubic2dAaBackwardBenchmark(Benchmark):
    """Inputs built from a private config list (special inputs)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cfgs = [
            (2, 3, 8, 8, 4, 4, False, "2x down"),
            (1, 2, 8, 8, 16, 16, False, "2x up"),
        ]

    def get_input_iter(self, cur_dtype):
        for n, c, hi, wi, ho, wo, ac, label in self._cfgs:
            grad = torch.randn([n, c, ho, wo], device=self.device, dtype=cur_dtype)
            yield grad, [ho, wo], [n, c, hi, wi], ac, None, None, label


@pytest.mark.upsample_bicubic2d_aa_backward
def test_upsample_bicubic2d_aa_backward_perf():
    bench = UpsampleBicubic2dAaBackwardBenchmark(op_name="upsample_bicubic2d_aa_backward",
                                                 torch_op=torch.ops.aten._upsample_bicubic2d_aa_backward,
                                                 dtypes=[torch.float32])
    bench.run()


def pad_input_fn(config, dtype, device):
    shape, pad, *mode = config  # (shape, pads) or (shape, pads, mode)
    if mode == ["replicate"] and len(shape) == 3:
        return  # a combination the benchmark skips (as FlagGems' attention skips unsafe ones)
    yield (generate_tensor_input(shape, dtype, device), list(pad), *({"mode": m} for m in mode))


class ConstantPadBenchmark(Benchmark):
    """set_shapes with nested entries, (input shape, pads), as FlagGems' pad benchmarks have."""

    def set_shapes(self, shape_file_path=None):
        self.shapes = [
            ((3, 8), (1, 2)),
            ((2, 4, 6), (1, 1)),
            ((2, 3, 4), (0, 2)),  # a zero pad: kept in the layout, not a size
        ]

    def get_input_iter(self, cur_dtype):
        for config in self.shapes:
            yield from pad_input_fn(config, cur_dtype, self.device)


class PadModeBenchmark(ConstantPadBenchmark):
    """Nested entries whose constants differ over the same sizes (as is_causal in attention)."""

    def set_shapes(self, shape_file_path=None):
        self.shapes = [
            ((3, 8), (1, 2), "constant"),
            ((3, 8), (1, 2), "replicate"),
            ((2, 4, 6), (1, 1), "constant"),
            ((2, 4, 6), (1, 1), "replicate"),  # yields nothing: no point
        ]


@pytest.mark.constant_pad
def test_constant_pad_perf():
    bench = ConstantPadBenchmark(op_name="constant_pad", torch_op=torch.nn.functional.pad, dtypes=[torch.float32])
    bench.run()


@pytest.mark.pad_mode
def test_pad_mode_perf():
    bench = PadModeBenchmark(op_name="pad_mode", torch_op=torch.nn.functional.pad, dtypes=[torch.float32])
    bench.run()


class NegBenchmark(Benchmark):
    def get_input_iter(self, cur_dtype):
        for shape in self.shapes:
            yield (generate_tensor_input(shape, cur_dtype, self.device),)


class NegOutBenchmark(NegBenchmark):
    """get_input_iter wraps super()'s, adding an out= buffer, as later checkouts' *Out classes do."""

    def get_input_iter(self, cur_dtype):
        for (inp,) in super().get_input_iter(cur_dtype):
            yield inp, {"out": torch.empty_like(inp)}


@pytest.mark.neg_out
def test_neg_out_perf():
    bench = NegOutBenchmark(op_name="neg_out", torch_op=torch.neg, dtypes=[torch.float32])
    bench.run()


TRIU_SHAPES = [(4, 4), (8, 6)]


class TriuFixedBenchmark(Benchmark):
    """Inputs fixed by the class: no self.shapes, no input_fn (as LinalgLuFactorBenchmark)."""

    def get_input_iter(self, cur_dtype):
        for shape in TRIU_SHAPES:
            for diagonal in (0, 1):
                yield torch.randn(shape, dtype=cur_dtype, device=self.device), {"diagonal": diagonal}


@pytest.mark.triu_fixed
def test_triu_fixed_perf():
    bench = TriuFixedBenchmark(op_name="triu_fixed", torch_op=torch.triu, dtypes=[torch.float32])
    bench.run()


class ChunkDictBenchmark(Benchmark):
    """Entries are dicts of sizes, as SparseMlaFwdBenchmark's are."""

    def set_shapes(self, shape_file_path=None):
        self.shapes = [{"rows": 8, "cols": 12, "chunks": 3}, {"rows": 4, "cols": 8, "chunks": 2}]

    def get_input_iter(self, cur_dtype):
        for p in self.shapes:
            yield torch.randn(p["rows"], p["cols"], dtype=cur_dtype, device=self.device), p["chunks"], {"dim": -1}


@pytest.mark.chunk_dict
def test_chunk_dict_perf():
    bench = ChunkDictBenchmark(op_name="chunk_dict", torch_op=torch.chunk, dtypes=[torch.float32])
    bench.run()
