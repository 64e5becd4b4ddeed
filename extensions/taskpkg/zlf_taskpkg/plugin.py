"""zlf extension ``task``: ``zlf task PKG_DIR --candidate FILE`` judges a contest task package.

See docs/taskpkg.md. The command is a run like every other (a run directory with one point
per case), so ``zlf compare`` / ``report`` / ``ab`` read it; its traits say it times points and
makes inputs, so core's run options and the active extensions' (``--seed``, a timer's options
...) apply to it.
"""
from __future__ import annotations

import argparse

from zlf import hookimpl
from zlf.options import SECONDS, CommandTraits, Number, deprecated, number_type
from zlf.output import add_format_argument

#: what zlf task does: it times its cases (a run of points), makes their inputs, and takes its
#: run settings from a config file too; it plans no op shapes (the package has its cases)
TRAITS = CommandTraits(times_points=True, makes_inputs=True, config_file=True)
#: --rtol / --atol (zlf task and zlf ab --task)
TOLERANCE = Number(float, 0, 1e6)

EPILOG = """\
examples:
  zlf task tests/data/taskpkg_vecadd --candidate tests/data/taskpkg_vecadd/candidates/correct.py
  zlf task PKG --candidate kernel.cu --cases 1,3-5 --rtol 1e-2 --atol 1e-2
  zlf task PKG --candidate fast.py --reuse-worker --ext task --ext cudagraph
verdicts: Accepted, Wrong Answer, Runtime Error, Compile Error, Time Limit Exceeded
          (Judge Error: the package itself failed)
exit codes: 0 every case Accepted with a trusted time, 1 a case was not (or its time is not trusted),
            2 bad input, 130 interrupted
"""


@hookimpl
def add_commands(subparsers):
    p = subparsers.add_parser(
        "task", help="judge a run_kernel candidate on a contest task package (verdicts, speedup vs baseline)",
        description="Judge a candidate (Python run_kernel or CUDA C++ extern \"C\" run_kernel) on the cases of a "
                    "task package: correctness with the package's check, then candidate and baseline timing.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("package", metavar="PKG_DIR", help="the task package folder (problem module + metadata)")
    p.add_argument("--candidate", metavar="FILE",
                   help="run_kernel candidate: .py (Triton, TileLang, torch) or .cu/.cpp (CUDA C++); "
                        "default: $ZLF_TASK_CANDIDATE")
    p.add_argument("--cases", metavar="LIST", help="1-based cases to judge, e.g. 1,3-5 (default: all)")
    p.add_argument("--rtol", type=TOLERANCE, help="rtol given to the package's check (default: metadata, else check's own)")
    p.add_argument("--atol", type=TOLERANCE, help="atol given to the package's check (default: metadata, else check's own)")
    p.add_argument("--compile-time-limit", type=Number(float, 0, SECONDS, low_open=True, unit="seconds"), metavar="SEC",
                   help="limit for compiling a CUDA C++ candidate (nvcc); past it: Compile Error; "
                        "default: metadata compile_time_limit_s, else 300")
    p.add_argument("--reuse-worker", action="store_true",
                   help="keep one worker process across cases until a case fails (faster; default: a fresh process per case)")
    add_sandbox_argument(p, default="auto")
    p.add_argument("--out", default="runs", metavar="PARENT", help="parent of the run directory (default: runs/)")
    p.add_argument("--name", metavar="LABEL", help="run directory label (default: the package name)")
    add_format_argument(p)
    t = p.add_argument_group("timing in calls (--warmup-ms and --rep-ms, in ms, override them)")
    t.add_argument("--warmup-calls", type=number_type("--warmup-calls"), dest="warmup", metavar="N",
                   help="warm-up calls, overriding the package's")
    deprecated(t, "--warmup", "--warmup-calls", type=number_type("--warmup-calls"), dest="warmup")
    t.add_argument("--iters", type=number_type("--iters"), metavar="N", help="timed calls, overriding the package's")
    c = p.add_argument_group("CUDA C++ candidates")
    c.add_argument("--nvcc-arch", metavar="SM", help="nvcc -arch (default: the device's, e.g. sm_90a; sm_90a without a GPU)")
    c.add_argument("--nvcc-flag", action="append", metavar="FLAG", help="extra nvcc flag (repeatable)")
    c.add_argument("--cache-dir", metavar="DIR", help="compiled-library cache (default: $ZLF_TASK_CACHE or ~/.cache/zlf/taskpkg)")
    p.set_defaults(handler=_cmd_task, traits=TRAITS)


def add_sandbox_argument(group, default=None, help_tail="default: auto") -> None:
    """``--sandbox``: zlf task's, and zlf ab --task's (which gives it to every run)."""
    group.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default=default,
                       help="the candidate's sandbox: bwrap (bubblewrap: read-only file system but a scratch "
                            "directory, private /dev/shm, no network, own pid namespace where the sharing "
                            "allows), none (the judge's own checks only; what that leaves open is said on "
                            f"screen and in meta.json), auto: bwrap where it runs, else none ({help_tail})")


# ---------------------------------------------------------------------- zlf ab --task (campaign.py)
@hookimpl
def add_campaign_options(parser):
    from . import campaign

    campaign.add_options(parser)


@hookimpl
def campaign_setup(plan, options, session):
    from . import campaign

    campaign.setup(plan, options)


def _cmd_task(args, session) -> int:
    from .judge import judge

    return judge(args, session)
