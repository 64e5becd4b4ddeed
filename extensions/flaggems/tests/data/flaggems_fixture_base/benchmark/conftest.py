import os

import flag_gems  # noqa: F401

from . import consts

Config = None  # created in pytest_configure, as in FlagGems' later layout


class BenchConfig:
    def __init__(self):
        self.mode = consts.BenchMode.KERNEL
        self.bench_level = consts.BenchLevel.COMPREHENSIVE
        self.warm_up = consts.DEFAULT_WARMUP_TIME
        self.repetition = consts.DEFAULT_ITER_TIME
        self.record_log = False
        self.record_json = False
        self.user_desired_dtypes = None
        self.user_desired_metrics = None
        self.shape_file = os.path.join(os.path.dirname(__file__), "core_shapes.yaml")
        self.query = False


def pytest_addoption(parser):
    parser.addoption("--mode", default="kernel", choices=[m.value for m in consts.BenchMode])
    parser.addoption("--level", default="comprehensive", choices=[lv.value for lv in consts.BenchLevel])


def pytest_configure(config):
    global Config
    Config = BenchConfig()
    Config.mode = consts.BenchMode(config.getoption("--mode"))
    Config.bench_level = consts.BenchLevel(config.getoption("--level"))
