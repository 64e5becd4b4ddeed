import os

import flag_gems  # noqa: F401
from benchmark.attri_util import DEFAULT_ITER_COUNT, DEFAULT_WARMUP_COUNT, BenchLevel, BenchMode


class BenchConfig:
    def __init__(self):
        self.mode = BenchMode.KERNEL
        self.bench_level = BenchLevel.COMPREHENSIVE
        self.warm_up = DEFAULT_WARMUP_COUNT
        self.repetition = DEFAULT_ITER_COUNT
        self.record_log = False
        self.user_desired_dtypes = None
        self.user_desired_metrics = None
        self.shape_file = os.path.join(os.path.dirname(__file__), "core_shapes.yaml")
        self.query = False


Config = BenchConfig()


def pytest_addoption(parser):
    parser.addoption("--mode", default="kernel", choices=[m.value for m in BenchMode])
    parser.addoption("--level", default="comprehensive", choices=[lv.value for lv in BenchLevel])


def pytest_configure(config):
    Config.mode = BenchMode(config.getoption("--mode"))
    Config.bench_level = BenchLevel(config.getoption("--level"))
