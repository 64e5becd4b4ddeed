"""Where a FlagGems checkout keeps its benchmark harness, and which file holds an op.

Nothing here imports FlagGems: this runs in ``configure``, before the backend is chosen.

Two harness layouts exist (docs/flaggems.md):

* ``v5`` (tag v5.0.2 and earlier): ``benchmark/performance_utils.py`` + ``benchmark/attri_util.py``;
  ops grouped per file (``test_reduction_perf.py``), selected by pytest marks.
* ``base`` (later): ``benchmark/base.py`` + ``benchmark/consts.py``; one file per op
  (``test_softmax.py``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

import attrs

from zlf import UsageError

ENV_DIR = "FLAGGEMS_DIR"

#: layout name -> (harness module, constants module), both under benchmark/.
LAYOUTS = {
    "v5": ("performance_utils", "attri_util"),
    "base": ("base", "consts"),
}


@attrs.frozen
class Checkout:
    root: Path
    layout: str

    @property
    def bench_dir(self) -> Path:
        return self.root / "benchmark"

    @property
    def harness_module(self) -> str:
        return LAYOUTS[self.layout][0]

    @property
    def consts_module(self) -> str:
        return LAYOUTS[self.layout][1]

    @property
    def default_shape_file(self) -> Path:
        return self.bench_dir / "core_shapes.yaml"

    def describe(self) -> str:
        h, c = LAYOUTS[self.layout]
        return f"{self.root} ({self.layout} layout: benchmark/{h}.py + {c}.py)"


def _expected() -> str:
    return " or ".join(f"benchmark/{h}.py + {c}.py" for h, c in LAYOUTS.values())


def find_checkout(directory: Optional[str], where: str) -> Checkout:
    """The checkout at ``directory``; ``where`` names the option or variable that gave it."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise UsageError(f"FlagGems checkout {where}={directory!r} not found: looked for a directory "
                         f"holding {_expected()}")
    bench = root / "benchmark"
    found = [name for name, (h, c) in LAYOUTS.items()
             if (bench / f"{h}.py").is_file() and (bench / f"{c}.py").is_file()]
    if not found:
        raise UsageError(f"{where}={directory!r} is not a supported FlagGems checkout: looked for "
                         f"{_expected()} under {bench}")
    if len(found) > 1:
        raise UsageError(f"{where}={directory!r} has both harness layouts ({_expected()}); "
                         "remove the stale one")
    return Checkout(root=root.resolve(), layout=found[0])


def checkout_from_options(options) -> Optional[Checkout]:
    """The checkout named by ``--flaggems-dir`` or ``FLAGGEMS_DIR``; None when neither is set.

    :param options: the run's extension options (:attr:`zlf.config.RunConfig.options`).
    """
    directory = options.get("flaggems_dir")
    if directory:
        return find_checkout(directory, "--flaggems-dir")
    if os.environ.get(ENV_DIR):
        return find_checkout(os.environ[ENV_DIR], ENV_DIR)
    return None


def parse_spec(spec: str) -> tuple:
    """``OP[:OP_FILE[::TEST]]`` -> (op, op_file or None, test function or None)."""
    op, _, rest = spec.partition(":")
    op_file, _, test = rest.partition("::")
    if not op or not re.fullmatch(r"[A-Za-z0-9_.]+", op):
        raise UsageError(f"FlagGems op {spec!r}: expected OP, OP:OP_FILE or OP:OP_FILE::TEST_FUNCTION")
    return op, op_file or None, test or None


def op_file_candidates(checkout: Checkout, op: str, op_file: Optional[str]) -> list:
    """The benchmark files that may hold ``op``, most likely first.

    With OP_FILE: ``test_<OP_FILE>.py`` (also ``test_<OP_FILE>_perf.py``, or the file name as
    given). Without: ``test_<OP>.py`` / ``test_<OP>_perf.py`` when one exists (the later layout
    has one file per op), else every ``test_*.py`` whose text mentions the op as a pytest mark
    or a quoted name (a cheap scan; nothing imported), except FlagTune's multi-process drivers
    ``test_*_parallel.py``: they rebuild the same benchmarks under the same op names.
    """
    bench = checkout.bench_dir
    if op_file:
        stem = op_file[:-3] if op_file.endswith(".py") else op_file
        stem = stem if stem.startswith("test_") else f"test_{stem}"
        names = [f"{stem}.py"] + ([] if stem.endswith("_perf") else [f"{stem}_perf.py"])
        found = [bench / n for n in names if (bench / n).is_file()]
        if not found:
            raise UsageError(f"FlagGems op file {op_file!r} not found: looked for "
                             f"{' or '.join(str(bench / n) for n in names)}")
        return found[:1]
    direct = [bench / f"test_{op}.py", bench / f"test_{op}_perf.py"]
    found = [p for p in direct if p.is_file()]
    if found:
        return found
    pattern = re.compile(rf"""mark\.{re.escape(op)}\b|["']{re.escape(op)}["']""")
    return [path for path, text in benchmark_texts(bench) if pattern.search(text)]


def benchmark_texts(bench):
    """``(path, text)`` of every ``test_*.py`` of the benchmark folder ``bench``, in name order
    (FlagTune's ``test_*_parallel.py`` drivers aside; unreadable files skipped)."""
    for path in sorted(bench.glob("test_*.py")):
        if path.stem.endswith("_parallel"):
            continue
        try:
            yield path, path.read_text(errors="replace")
        except OSError:
            continue
