"""Fixture harness, v5.0.2 layout (performance_utils.py + attri_util.py)."""
import os
import time

import pytest
import torch
import yaml

import flag_gems

from .attri_util import (
    DEFAULT_METRICS,
    DEFAULT_SHAPES,
    FLOAT_DTYPES,
    BenchLevel,
    BenchmarkMetrics,
    BenchmarkResult,
)
from .conftest import Config

torch_device_fn = flag_gems.runtime.torch_device_fn
device = flag_gems.device
vendor_name = flag_gems.vendor_name


class Benchmark:
    device: str = device
    DEFAULT_METRICS = DEFAULT_METRICS
    DEFAULT_DTYPES = FLOAT_DTYPES
    DEFAULT_SHAPES = DEFAULT_SHAPES
    DEFAULT_SHAPE_DESC = "M, N"
    DEFAULT_SHAPE_FILES = "core_shapes.yaml"

    def __init__(self, op_name, torch_op, dtypes=None, is_backward=False, is_inplace=False, **kwargs):
        self.op_name = op_name + ("_backward" if is_backward and "_backward" not in op_name else "")
        self.torch_op = torch_op
        self.gems_op = None
        self.is_backward = is_backward
        self.is_inplace = is_inplace
        self.dtypes = dtypes if dtypes is not None else self.DEFAULT_DTYPES
        self.metrics = list(self.DEFAULT_METRICS)
        self.shapes = self.DEFAULT_SHAPES
        self.shape_desc = self.DEFAULT_SHAPE_DESC
        self.to_bench_dtypes = self.dtypes
        self.to_bench_metrics = self.metrics
        for k, v in kwargs.items():
            if hasattr(self, k):
                setattr(self, k, v)

    def set_metrics(self, wanted):
        self.to_bench_metrics = list(wanted or self.metrics)
        if Config.bench_level == BenchLevel.COMPREHENSIVE:
            self.to_bench_metrics += [m for m in self.set_more_metrics() if m not in self.to_bench_metrics]

    def set_more_metrics(self):
        return []

    def set_dtypes(self, wanted):
        bad = [d for d in wanted or () if d not in self.dtypes]
        if bad:
            raise ValueError(f"Given dtype(s) '{', '.join(map(str, bad))}'can't be supported by this op '{self.op_name}'")
        self.to_bench_dtypes = wanted or self.dtypes

    def set_shapes(self, shape_file_path=None):
        if not os.path.isfile(shape_file_path):
            raise FileNotFoundError(f"Shape file '{shape_file_path}' does not exist.")
        with open(shape_file_path) as f:
            doc = yaml.safe_load(f) or {}
        keys = [self.op_name] + [c.__name__ for c in type(self).__mro__]
        key = next((k for k in keys if k in doc), None)
        entry = doc[key] if key else {}
        self.shapes = [tuple(s) for s in entry.get("shapes", self.DEFAULT_SHAPES)]
        self.shape_desc = entry.get("shape_desc", self.DEFAULT_SHAPE_DESC)
        if Config.bench_level == BenchLevel.COMPREHENSIVE:
            more = self.set_more_shapes()
            if more:
                self.shapes = list(dict.fromkeys(self.shapes + [tuple(s) for s in more]))

    def set_more_shapes(self):
        return None

    def init_user_config(self):
        self.mode = Config.mode
        self.set_dtypes(Config.user_desired_dtypes)
        self.set_metrics(Config.user_desired_metrics)
        self.set_shapes(Config.shape_file)

    def set_gems(self, gems_op):
        self.gems_op = gems_op

    def record_shapes(self, *args, **kwargs):
        def parse(x):
            if isinstance(x, torch.Tensor):
                return x.size()
            if isinstance(x, (list, tuple)):
                return [parse(v) for v in x]
            if isinstance(x, dict):
                return {k: parse(v) for k, v in x.items()}
            return x if isinstance(x, (int, float, str, torch.dtype)) else None
        a, k = [parse(x) for x in args], {n: parse(v) for n, v in kwargs.items()}
        return (a, k) if a and k else (a or k)

    def get_latency(self, op, *args, **kwargs):
        if self.is_inplace:
            fn = lambda: op(*[x.clone() if torch.is_tensor(x) else x for x in args], **kwargs)  # noqa: E731
        else:
            fn = lambda: op(*args, **kwargs)  # noqa: E731
        if self.is_backward:
            out = fn()
            dout = torch.randn_like(out)
            xs = [x for x in args if torch.is_tensor(x) and x.requires_grad]
            fn = lambda: torch.autograd.grad((out,), xs, grad_outputs=(dout,), retain_graph=True)  # noqa: E731
        for _ in range(Config.warm_up):
            fn()
        start = time.perf_counter()
        for _ in range(Config.repetition):
            fn()
        return (time.perf_counter() - start) / Config.repetition * 1000

    def get_gbps(self, args, latency=None):
        raise NotImplementedError("Each Benchmark must implement its own input iterator.")

    def get_tflops(self, op, *args, **kwargs):
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            op(*args, **kwargs)
        return counter.get_total_flops()

    def get_input_iter(self, dtype):
        raise NotImplementedError("Each Benchmark must implement its own input iterator.")

    def unpack_to_args_kwargs(self, input_tuple):
        args, kwargs = [], {}
        for item in input_tuple:
            if isinstance(item, dict):
                kwargs.update(item)
            elif isinstance(item, (torch.Tensor, int, float, list, tuple, torch.dtype)) or item is None:
                args.append(item)
        if self.is_backward:
            args = [a.clone().requires_grad_() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
        return args, kwargs

    def run(self):
        self.init_user_config()
        for dtype in self.to_bench_dtypes:
            metrics = []
            for inp in self.get_input_iter(dtype):
                m = BenchmarkMetrics()
                try:
                    args, kwargs = self.unpack_to_args_kwargs(inp)
                    m.shape_detail = self.record_shapes(*args, **kwargs)
                    m.latency_base = self.get_latency(self.torch_op, *args, **kwargs)
                    if self.gems_op:
                        m.latency = self.get_latency(self.gems_op, *args, **kwargs)
                    else:
                        with flag_gems.use_gems(exclude=["zero_"]):
                            m.latency = self.get_latency(self.torch_op, *args, **kwargs)
                    m.speedup = m.latency_base / m.latency
                except Exception as e:
                    m.error_msg = str(e)
                    pytest.fail(str(e))
                finally:
                    metrics.append(m)
            print(BenchmarkResult(op_name=self.op_name, dtype=str(dtype), mode=Config.mode.value,
                                  level=Config.bench_level.value, result=metrics))


class GenericBenchmark(Benchmark):
    def __init__(self, *args, input_fn, **kwargs):
        super().__init__(*args, **kwargs)
        self.input_fn = input_fn

    def set_more_shapes(self):
        return [(1000, 2**i) for i in (0, 8)]

    def get_input_iter(self, cur_dtype):
        for shape in self.shapes:
            yield from self.input_fn(shape, cur_dtype, self.device)


class GenericBenchmark2DOnly(GenericBenchmark):
    def set_more_shapes(self):
        return [s for s in super().set_more_shapes() if len(s) == 2]


def generate_tensor_input(shape, dtype, device):
    if dtype in FLOAT_DTYPES:
        return torch.randn(shape, dtype=dtype, device=device)
    return torch.randint(-100, 100, shape, dtype=dtype, device="cpu").to(device)


def unary_input_fn(shape, cur_dtype, device):
    yield (generate_tensor_input(shape, cur_dtype, device),)


def binary_input_fn(shape, cur_dtype, device):
    yield generate_tensor_input(shape, cur_dtype, device), generate_tensor_input(shape, cur_dtype, device)
