"""What ``zlf task`` needs of a problem module, read in a child process: the judge never imports it.

The judge needs the number of cases, the base seed, the declared outputs and each judged case's
argument shapes before any case runs. Importing the problem module for them in the judge's own
process let the package end the judge: a module that kills its process with a signal, or crashes
the interpreter, on import, took ``zlf task`` with it (exit -9, no word). :func:`read` runs
``python -m zlf_taskpkg.probe PKG_DIR OUT CASES`` instead, in a process group of its own that dies
with the judge; whatever goes wrong there (an exception, an exit, a signal, a hang past
:data:`LIMIT_S`) is a one-line :class:`~zlf.UsageError` naming what the child was doing, and the
judge goes on to exit 2 as for any bad package.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import attrs

from zlf import UsageError, readers
from zlf.procs import die_with_parent, kill_group, python_child_env
from zlf.rundir import write_atomic

from .package import TaskPackage, parse_cases

#: how long reading the package (importing its module, counting and sizing its cases) may take
LIMIT_S = 600.0
#: the child's answer: the facts, or the one-line error its package gave
RESULT = "package.json"
#: what the child is doing, written before each step: named when the child dies in it
PHASE = "phase.txt"


@attrs.frozen
class PackageFacts:
    """What the judge knows of a package's problem module: the cases it judges (1-based), the
    base seed, the declared output arguments (None: not declared), and each judged case's
    argument shapes (None where ``getTestCaseSize`` failed: the case's checker says why)."""

    cases: list
    base_seed: int
    outputs: Optional[list]
    shapes: dict

    def case_shapes(self, case: int) -> Optional[list]:
        return self.shapes.get(case)


def read(package: TaskPackage, cases: Optional[str], limit: float = LIMIT_S) -> PackageFacts:
    """The facts of ``package`` for ``--cases cases``, from a child process (module docstring)."""
    where = f"problem module {str(package.module_path)!r}"
    with tempfile.TemporaryDirectory(prefix="zlf-task-package-") as tmp:
        out = Path(tmp)
        argv = [sys.executable, "-m", __name__, str(package.root), str(out), cases or ""]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=python_child_env(os.environ),
                                start_new_session=True,  # its group: whatever the module starts goes with it
                                preexec_fn=die_with_parent(signal.SIGKILL))
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            raise UsageError(f"{where}: {_phase(out)} did not finish within {limit:g} s") from None
        finally:
            kill_group(proc)  # also what the module left running
        if not (out / RESULT).is_file():
            raise UsageError(f"{where}: {_phase(out)} {_death(rc)}")
        answer = readers.read_json(out / RESULT, what="the package's facts")
    if "error" in answer:
        raise UsageError(str(answer["error"]))
    return PackageFacts(cases=answer["cases"], base_seed=answer["base_seed"], outputs=answer["outputs"],
                        shapes={int(k): v for k, v in answer["shapes"].items()})


def _phase(out: Path) -> str:
    try:
        return (out / PHASE).read_text(errors="replace").strip() or "starting"
    except OSError:
        return "starting"


def _death(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"killed its process with {name}: a task package must not end the judge's processes"
    return f"ended its process (exit code {rc}) without a word: a task package must not end the judge's processes"


def facts(package: TaskPackage, cases: Optional[str], step=lambda what: None) -> dict:
    """The facts as JSON, read in this process (the child's work); ``step`` is told each step."""
    step("importing it")
    package.load()
    step("calling getNumOfTestcases()")
    chosen = parse_cases(cases, package.num_cases())
    step("reading its seed and outputs")
    base_seed, outputs = package.base_seed(), package.declared_outputs()
    shapes = {}
    for case in chosen:
        step(f"calling getTestCaseSize() for case {case}")
        try:
            shapes[case] = [list(s) for s in package.case_sizes(case)[0]]
        except Exception:  # the case's checker calls it again, and says why as its Judge Error
            shapes[case] = None
    return {"cases": chosen, "base_seed": base_seed, "outputs": outputs, "shapes": shapes}


def main(argv: list) -> int:
    root, out, cases = argv
    out = Path(out)

    def step(what: str) -> None:
        write_atomic(out / PHASE, what)

    try:
        answer = facts(TaskPackage.open(root), cases or None, step)
    except UsageError as exc:
        answer = {"error": str(exc)}
    except Exception as exc:  # a package that fails beyond the steps' own errors
        answer = {"error": f"task package {root!r}: {type(exc).__name__}: {exc}"}
    write_atomic(out / RESULT, json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
