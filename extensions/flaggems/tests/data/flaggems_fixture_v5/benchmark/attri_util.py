from dataclasses import dataclass
from enum import Enum
from typing import List, Optional

import torch

FLOAT_DTYPES = [torch.float16, torch.float32, torch.bfloat16]
INT_DTYPES = [torch.int16, torch.int32]
DEFAULT_WARMUP_COUNT = 10
DEFAULT_ITER_COUNT = 10
DEFAULT_SHAPES = [(64, 64), (16, 32, 32)]
DEFAULT_METRICS = ["latency_base", "latency", "speedup"]


class BenchMode(Enum):
    KERNEL = "kernel"
    OPERATOR = "operator"
    WRAPPER = "wrapper"


class BenchLevel(Enum):
    COMPREHENSIVE = "comprehensive"
    CORE = "core"


@dataclass
class BenchmarkMetrics:
    shape_detail: Optional[object] = None
    latency_base: Optional[float] = None
    latency: Optional[float] = None
    speedup: Optional[float] = None
    gbps_base: Optional[float] = None
    gbps: Optional[float] = None
    tflops: Optional[float] = None
    error_msg: Optional[str] = None


@dataclass
class BenchmarkResult:
    op_name: str
    dtype: str
    mode: str
    level: str
    result: List[BenchmarkMetrics]

    def __str__(self):
        cols = ["Status".ljust(10), "Torch Latency (ms)".rjust(20), "Gems Latency (ms)".rjust(20),
                "Gems Speedup".rjust(20), "Size Detail".rjust(20)]
        head = " ".join(cols)
        out = [f"\nOperator: {self.op_name}  Performance Test (dtype={self.dtype}, mode={self.mode},"
               f"level={self.level})", head, "-" * len(head)]
        for m in self.result:
            fmt = lambda v, d: "N/A" if v is None else f"{v:.{d}f}"  # noqa: E731
            out.append(("SUCCESS" if m.error_msg is None else "FAILED").ljust(10) + fmt(m.latency_base, 6).rjust(20)
                       + fmt(m.latency, 6).rjust(20) + fmt(m.speedup, 3).rjust(20) + " " * 10 + str(m.shape_detail))
        return "\n".join(out) + "\n"
