"""``zlf ab --task PKG --a-candidate A --b-candidate B``: task packages as the ops of a campaign.

Each run is ``zlf task PKG --config <the side's run configuration> --reuse-worker --candidate
<side's>`` with the task options given to ``zlf ab`` (``--cases``, ``--rtol``, ``--atol``: arguments
of ``zlf task`` itself); the op's name is the package's.
"""
from __future__ import annotations

import os

from zlf import UsageError
from zlf.ab import add_example
from zlf.ab.campaign import OpSpec

#: this extension's entry-point name: every run of a task campaign selects it.
EXTENSION = "task"
#: ``zlf task``'s own options a task campaign passes on to every run (dest, flag); its run
#: settings (``--time-limit``, the timing options ...) are in each side's run configuration.
TASK_OPTIONS = (("cases", "--cases"), ("rtol", "--rtol"), ("atol", "--atol"))
#: the variable that names a side's candidate: no compiler switch.
CANDIDATE_ENV = "ZLF_TASK_CANDIDATE"


def add_options(parser) -> None:
    from .plugin import TOLERANCE

    add_example(parser, "zlf ab --task PKG --a-candidate a.py --b-candidate b.py --rounds 4   two task-package candidates")
    t = parser.add_argument_group("task packages (zlf task, docs/taskpkg.md): the op is the package")
    t.add_argument("--task", action="append", metavar="PKG_DIR", help="judge this task package in every run instead of OPs (repeatable)")
    t.add_argument("--a-candidate", metavar="FILE", help="run_kernel candidate of side A (--candidate of its zlf task runs)")
    t.add_argument("--b-candidate", metavar="FILE", help="run_kernel candidate of side B")
    t.add_argument("--cases", metavar="LIST", help="cases to judge, e.g. 1,3-5 (default: all)")
    t.add_argument("--rtol", type=TOLERANCE, help="rtol given to the package's check")
    t.add_argument("--atol", type=TOLERANCE, help="atol given to the package's check")


def task_op(package: str) -> OpSpec:
    """A task package as a campaign op: its name is the package's name (metadata ``name``, else
    the folder), the one its runs give their points."""
    from .package import TaskPackage  # reads metadata only; imports no kernel

    path = os.path.abspath(package)
    if not os.path.isdir(path):
        raise UsageError(f"--task {package!r} is not a directory")
    return OpSpec(TaskPackage.open(path).name, path, path, command="task")


def candidate_args(options, side: str) -> list:
    """``--candidate FILE`` of side ``side``'s runs; ``options``: :class:`zlf.ab.CampaignOptions`."""
    flag = f"--{side.lower()}-candidate"
    path = options.get(f"{side.lower()}_candidate")
    if not path:
        return []
    if not options.get("task"):
        raise UsageError(f"{flag} needs --task PKG_DIR")
    if not os.path.isfile(path):
        raise UsageError(f"{flag} {path!r} is not a file")
    return ["--candidate", os.path.abspath(path)]


def task_args(options) -> list:
    """The task options given to ``zlf ab``, as every ``zlf task`` run gets them."""
    out = []
    for dest, flag in TASK_OPTIONS:
        value = options.get(dest)
        if value is not None:
            out += [flag, str(value)]
    return out


def setup(plan, options) -> None:
    """Fill a campaign's plan from ``--task`` and the candidates (nothing without ``--task``);
    ``options``: the :class:`zlf.ab.CampaignOptions` ``campaign_setup`` receives."""
    sides = {s: candidate_args(options, s) for s in ("A", "B")}
    if not options.get("task"):
        for dest, flag in TASK_OPTIONS:
            if options.get(dest) is not None:
                raise UsageError(f"{flag} needs --task PKG_DIR")
        return
    if options.ops:
        raise UsageError(f"give either OPs or --task PKG_DIR, not both ({' '.join(options.ops)})")
    if options.run.dtypes:
        raise UsageError("--dtype does not apply to --task (the package generates its inputs)")
    b_env = {item.partition("=")[0] for item in options.b_env}
    a_env = {item.partition("=")[0] for item in options.a_env}
    if not options.aa:
        for side, env in (("A", a_env), ("B", b_env)):
            if not sides[side] and CANDIDATE_ENV not in env:
                raise UsageError(f"--task: side {side} has no candidate "
                                 f"(--{side.lower()}-candidate FILE or --{side.lower()}-env {CANDIDATE_ENV}=FILE)")
    plan.ops = [task_op(t) for t in options.get("task")]
    plan.side_args = sides
    plan.run_args += ["--reuse-worker", *task_args(options)]  # one worker process per run, as a zlf run is one
    plan.extensions.append(EXTENSION)
    plan.not_switches.append(CANDIDATE_ENV)  # differs by design; read by zlf task, not the code under test
    plan.per_op = True
    plan.label = plan.ops[0].name
