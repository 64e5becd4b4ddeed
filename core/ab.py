"""Multi-round A/B campaign: every run a fresh zlf run process; verdicts with a stated error rate.

Side B is the change, side A the baseline. Round 1's A run records autotune choices and every
other run replays them (when the ``autotune_replay`` extension is active); odd rounds run A then B,
even rounds B then A. The statistics and the verdict rule are in :mod:`zlf.stats` and docs/ab.md.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import metrics, stats
from .campaign import (C_COMPLETE, C_INTERRUPTED, C_RUNNING, FAILED, OK, PENDING, PER_OP, RUNNING, SHARED,
                       SHARED_PROCESS, SKIPPED, SUMMARY_JSON, SUMMARY_LOG, Campaign, CampaignJob, OpSpec, Side,
                       campaign_units, now)
from .console import clean, clean_lines, paint, warn
from .errors import UsageError
from .executors import add_scale_arguments, make_executor, parse_gpus, pin_variable
from .procs import stop_code, stop_word
from .records import duplicate_points
from .redact import credential_in
from .rundir import RESULTS, RunDir, safe_name
from .scheduler import Scheduler, gpu_label

EPILOG = """\
examples:
  zlf ab --switch DISABLE_MMA_V3 matmul          DISABLE_MMA_V3=0 on A, =1 on B, 6 rounds
  zlf ab --aa --rounds 6                         A/A over the built-in suite: the run-to-run noise
  zlf ab --switch X --noise-from runs/ab_aa_...  pool that A/A's noise into the intervals
  zlf ab --a-python venvA/bin/python --b-python venvB/bin/python softmax
  zlf ab --switch X --until-confident --max-rounds 12 --ext autotune_replay
  zlf ab --resume runs/ab_X_20250101-120000      finish an interrupted campaign
  zlf ab --switch X --metric cycles matmul       decide on time x measured SM clock (power-capped GPUs)
  zlf ab --task PKG --a-candidate a.py --b-candidate b.py --rounds 4   two task-package candidates
  zlf ab --switch X --gpus 0,1,2,3               one worker per GPU; a round's A and B share a GPU
  zlf ab --switch X --process-per-op a b c       a zlf run process per op (default: one per round and side)
  zlf ab --switch X --executor ray --ray-address HEAD:6379   Ray tasks of one GPU each
verdicts (B against A): FASTER, SLOWER, SAME, UNSURE -- the rule is in docs/ab.md
exit codes: 0 done, 1 an op failed (or --fail-on-slower and a point is SLOWER), 2 bad input, 130 interrupted,
            143 terminated (SIGTERM; --resume continues either)
"""

DEFAULT_ROUNDS = 6
#: first look of an adaptive campaign when --rounds is not given.
DEFAULT_FIRST_LOOK = 3
DEFAULT_MAX_ROUNDS = 12
REPLAY_EXTENSION = "autotune_replay"
_DEFAULTS = stats.Settings()
#: run options ``zlf ab`` owns itself; an extension's option of the same name is not passed on.
OWN_RUN_OPTIONS = ("replay_from",)
#: the extension whose ``zlf task`` command judges task packages (``--task``).
TASK_EXTENSION = "task"
#: ``zlf task`` options a task campaign passes on to every run (dest, flag).
TASK_OPTIONS = (("cases", "--cases"), ("rtol", "--rtol"), ("atol", "--atol"), ("time_limit", "--time-limit"))
UNITS = ("pair", "op")
#: side variables that are no compiler switch: the switch guard leaves them out.
NOT_SWITCHES = ("ZLF_TASK_CANDIDATE",)


# ----------------------------------------------------------------------------- command line
def _run_pass_through(parser: argparse.ArgumentParser) -> None:
    """Core run options every run of the campaign gets (the same names as ``zlf run``)."""
    g = parser.add_argument_group("passed to every zlf run")
    g.add_argument("--dtype", action="append", metavar="D", help="dtype(s) instead of each op's defaults")
    g.add_argument("--backend", metavar="NAME", help="cpu, cuda, or an extension's backend")
    g.add_argument("--device", type=int, default=0, metavar="N", help="device index (default 0)")
    g.add_argument("--timer", metavar="EXT", help="which extension's time_fn to use")
    g.add_argument("--warmup-ms", type=float, metavar="MS", help="warm-up budget per point")
    g.add_argument("--rep-ms", type=float, metavar="MS", help="measurement budget per point")
    l2 = g.add_mutually_exclusive_group()
    l2.add_argument("--flush-l2", dest="flush_l2", action="store_true", default=None, help="flush L2 before every sample")
    l2.add_argument("--no-flush-l2", dest="flush_l2", action="store_false", help="keep L2 warm between samples")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("ops", nargs="*", metavar="OP",
                        help="op, OP:OP_FILE, FILE.py[::NAME], or an extension's spelling such as flaggems' OP:OP_FILE::TEST (default: the built-in suite add softmax matmul)")
    s = parser.add_argument_group("sides (combinable; B is the change, A the baseline)")
    s.add_argument("--switch", metavar="NAME", help="environment variable set to 0 on A and 1 on B")
    s.add_argument("--a-env", action="append", default=[], metavar="K=V", help="extra environment of side A (repeatable)")
    s.add_argument("--b-env", action="append", default=[], metavar="K=V", help="extra environment of side B (repeatable)")
    s.add_argument("--a-python", metavar="PATH", help="interpreter of side A (a compiler build with zlf installed)")
    s.add_argument("--b-python", metavar="PATH", help="interpreter of side B")
    s.add_argument("--aa", action="store_true", help="A/A calibration: B is a copy of A; measures the noise floor")
    t = parser.add_argument_group("task packages (zlf task, docs/taskpkg.md): the op is the package")
    t.add_argument("--task", action="append", metavar="PKG_DIR", help="judge this task package in every run instead of OPs (repeatable)")
    t.add_argument("--a-candidate", metavar="FILE", help="run_kernel candidate of side A (--candidate of its zlf task runs)")
    t.add_argument("--b-candidate", metavar="FILE", help="run_kernel candidate of side B")
    t.add_argument("--cases", metavar="LIST", help="cases to judge, e.g. 1,3-5 (default: all)")
    t.add_argument("--rtol", type=float, help="rtol given to the package's check")
    t.add_argument("--atol", type=float, help="atol given to the package's check")
    t.add_argument("--time-limit", type=float, metavar="SEC",
                   help="per-case limit of the candidate; without --task: every zlf run's per-point limit")
    r = parser.add_argument_group("rounds")
    r.add_argument("--rounds", type=int, metavar="N",
                   help=f"rounds of A+B runs (default {DEFAULT_ROUNDS}; with --until-confident the first look, default {DEFAULT_FIRST_LOOK})")
    r.add_argument("--until-confident", action="store_true",
                   help="look after every round; a decided point keeps its verdict and only ops with an undecided "
                        "point get another round, up to --max-rounds (O'Brien-Fleming alpha spending keeps the error rate)")
    r.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS, metavar="M",
                   help=f"upper bound of --until-confident (default {DEFAULT_MAX_ROUNDS})")
    st = parser.add_argument_group("statistics (docs/ab.md)")
    st.add_argument("--alpha", type=float, default=_DEFAULTS.alpha, metavar="A",
                    help="chance of any wrong verdict in the whole campaign (default 0.05)")
    st.add_argument("--min-effect", type=float, default=_DEFAULTS.min_effect_pct, metavar="PCT",
                    help="the effect threshold delta, percent (default 1): SLOWER/FASTER need the whole interval "
                         "beyond +-delta, SAME inside it")
    st.add_argument("--margin", type=float, default=None, dest="margin", help=argparse.SUPPRESS)  # deprecated alias of --min-effect
    st.add_argument("--pairing", choices=stats.PAIRINGS, default=stats.AUTO,
                    help="paired per-round deltas or unpaired sides (default auto: chosen from the data's variances)")
    st.add_argument("--noise-from", metavar="DIR",
                    help="an A/A campaign (zlf ab --aa) whose per-point variance is pooled into the intervals")
    st.add_argument("--metric", choices=metrics.NAMES, default=None,
                    help="what the verdicts decide on: time (default), cycles (time x measured SM clock), "
                         "wall (host wall-clock per call); with --resume: re-decide a campaign on another metric")
    g = parser.add_argument_group("guards")
    g.add_argument("--switch-source", action="append", metavar="PATH",
                   help="where the switch must be referenced (repeatable; default: each side's triton package and the op sources)")
    g.add_argument("--require-idle", action="store_true", help="refuse to start a run while the device is busy or throttled")
    g.add_argument("--idle-wait", type=float, default=60.0, metavar="S",
                   help="with --require-idle: how long to wait for an idle device before stopping (default 60)")
    o = parser.add_argument_group("output")
    o.add_argument("--out", default="runs", metavar="PARENT", help="parent of the campaign directory (default: runs/)")
    o.add_argument("--label", metavar="LABEL", help="campaign directory label (default: the switch, 'aa' or 'ab')")
    o.add_argument("--resume", metavar="DIR", help="complete an interrupted campaign (its own options are used)")
    o.add_argument("--triton-cache", metavar="DIR",
                   help="parent of the per-side Triton caches, to reuse them across campaigns (default: inside the campaign)")
    o.add_argument("--process-per-op", action="store_true",
                   help="one zlf run process per op, round and side (default: one per round and side for all ops; "
                        "an op that fails there is re-run alone)")
    o.add_argument("--fail-on-slower", action="store_true", help="exit 1 when any point is SLOWER")
    o.add_argument("--dry-run", action="store_true", help="print the sides, the runs and the guards; run nothing")
    _run_pass_through(parser)
    add_scale_arguments(parser)
    parser.add_argument("--unit", choices=UNITS, default=None,
                        help="work unit with --gpus / --executor: a round pair (default) or a whole op")


def _parse_env(items, flag) -> dict:
    env = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected K=V")
        why = credential_in(key, value)
        if why:  # campaign.json and the report are for sharing; runs inherit the environment anyway
            raise UsageError(f"{flag} {key}=...: {why}, and campaign.json would keep it: "
                             "export it instead (runs inherit the environment, which is never recorded whole)")
        env[key] = value
    return env


def build_sides(args) -> tuple:
    """``(A, B)`` from --switch / --a-env / --b-env / --a-python / --b-python / --aa."""
    a_env, b_env = {}, {}
    if args.switch:
        a_env[args.switch], b_env[args.switch] = "0", "1"
    for target, items, flag in ((a_env, args.a_env, "--a-env"), (b_env, args.b_env, "--b-env")):
        for k, v in _parse_env(items, flag).items():
            if args.switch and k == args.switch:
                raise UsageError(f"{flag} {k}=...: {k} is already the --switch")
            target[k] = v
    for flag in ("a_python", "b_python"):
        path = getattr(args, flag)
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(f"--{flag.replace('_', '-')} {path!r} is not an executable file")
    a_args, b_args = (_candidate_args(args, flag) for flag in ("a_candidate", "b_candidate"))
    a = Side("A", a_env, os.path.abspath(args.a_python) if args.a_python else "", a_args)
    if args.aa:
        if args.switch or args.b_env or args.b_python or b_args:
            raise UsageError("--aa makes B a copy of A: drop --switch, --b-env, --b-python and --b-candidate")
        return a, Side("B", dict(a.env), a.python, a.args)
    b = Side("B", b_env, os.path.abspath(args.b_python) if args.b_python else "", b_args)
    if not (args.switch or args.a_env or args.b_env or args.a_python or args.b_python or a_args or b_args):
        raise UsageError("say what differs between the sides: --switch NAME, --a-env/--b-env K=V, "
                         "--a-python/--b-python PATH, --a-candidate/--b-candidate FILE, or --aa for an A/A calibration")
    if getattr(args, "task", None):
        for side in (a, b):
            if not side.args and "ZLF_TASK_CANDIDATE" not in side.env:
                raise UsageError(f"--task: side {side.name} has no candidate "
                                 f"(--{side.name.lower()}-candidate FILE or --{side.name.lower()}-env ZLF_TASK_CANDIDATE=FILE)")
    if (a.env, a.interpreter, a.args) == (b.env, b.interpreter, b.args):
        warn("sides A and B are defined identically: this is an A/A campaign (use --aa to say so)")
    return a, b


def _candidate_args(args, flag) -> list:
    path = getattr(args, flag, None)
    if not path:
        return []
    if not getattr(args, "task", None):
        raise UsageError(f"--{flag.replace('_', '-')} needs --task PKG_DIR")
    if not os.path.isfile(path):
        raise UsageError(f"--{flag.replace('_', '-')} {path!r} is not a file")
    return ["--candidate", os.path.abspath(path)]


def pass_through_args(args, hooks, add_core=_run_pass_through, own=OWN_RUN_OPTIONS, skip=()) -> list:
    """The run options given to ``zlf ab`` (core's and the active extensions'), re-spelt for
    ``zlf run``: argparse actions know how each was written.

    :param add_core: adds the core options to pass on; ``own``: options that are an error here;
        ``skip``: destinations never passed on (a sharded ``zlf run`` sets its own ``--out``).
    """
    scratch = argparse.ArgumentParser(add_help=False)
    add_core(scratch)
    hooks.add_options(scratch)
    out, done = [], set()
    for action in scratch._actions:
        dest = action.dest
        if dest in done or dest in skip or not action.option_strings or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if value is None or value == action.default:
            continue
        if dest in own:
            raise UsageError(f"{action.option_strings[0]} is set by zlf ab itself (round 1 A records, every other run replays)")
        flag = action.option_strings[0]
        if isinstance(action, (argparse._StoreConstAction, argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if value != action.const:
                continue  # the other flag of a pair (--flush-l2 / --no-flush-l2) spells it
            out.append(flag)
        elif isinstance(action, argparse._CountAction):
            out.extend([flag] * int(value))
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                out.extend([flag, *map(str, item)] if isinstance(item, (list, tuple)) else [flag, str(item)])
        elif isinstance(value, (list, tuple)):
            out.extend([flag, *map(str, value)])
        else:
            out.extend([flag, str(value)])
        done.add(dest)
    return out


def extension_args(hooks, need_task: bool = False) -> list:
    """Select in every run exactly the extensions active here (install order never decides);
    a task campaign's runs also need the extension that provides ``zlf task``."""
    active = [i.name for i in hooks.infos if i.status == "active"]
    if need_task and TASK_EXTENSION not in active:
        active.append(TASK_EXTENSION)
    if active:
        return [a for name in active for a in ("--ext", name)]
    return [a for i in hooks.infos for a in ("--no-ext", i.name)]


def task_args(args) -> list:
    """Options every ``zlf task`` run of a task campaign gets: one worker process per run (as a
    ``zlf run`` is one process), then the task options given to ``zlf ab``."""
    if not getattr(args, "task", None):
        return []
    out = ["--reuse-worker"]
    for dest, flag in TASK_OPTIONS:
        value = getattr(args, dest, None)
        if value is not None:
            out += [flag, str(value)]
    return out


def run_limit_args(args) -> list:
    """``--time-limit`` of an op campaign: each ``zlf run``'s per-point limit (a task campaign
    passes it as the per-case limit, see :func:`task_args`)."""
    limit = getattr(args, "time_limit", None)
    if limit is None:
        return []
    if not limit >= 0:
        raise UsageError(f"--time-limit {limit:g}: expected seconds >= 0 (0: no limit)")
    return [] if getattr(args, "task", None) else ["--time-limit", str(limit)]


def scale_options(args, previous) -> "dict | None":
    """``--gpus`` / ``--executor`` / ``--ray-address`` / ``--retries`` / ``--unit`` as stored in
    campaign.json; given with --resume they replace the stored ones (the node may be gone)."""
    given = {k: getattr(args, k, None) for k in ("gpus", "executor", "ray_address", "retries", "unit")}
    if not any(v is not None for v in given.values()):
        return previous
    out = dict(previous or {})
    out.update({k: v for k, v in given.items() if v is not None})
    out["gpus"] = parse_gpus(out["gpus"]) if isinstance(out.get("gpus"), str) else out.get("gpus") or []
    if not out["gpus"] and out.get("executor") != "ray":
        raise UsageError("--executor local, --retries and --unit need --gpus LIST")
    if out.get("ray_address") and out.get("executor") != "ray":
        raise UsageError("--ray-address needs --executor ray")
    return out


# ----------------------------------------------------------------------------- guards
def _triton_dir(python: str) -> str:
    code = "import importlib.util,os;s=importlib.util.find_spec('triton');print(os.path.dirname(s.origin) if s and s.origin else '')"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def default_switch_sources(sides, ops) -> list:
    """Each side's installed Triton package and the op sources (built-in ops: zlf's ops module)."""
    paths = []
    for python in dict.fromkeys(s.interpreter for s in sides):
        d = _triton_dir(python)
        if d:
            paths.append(d)
    for op in ops:
        if op.source:
            paths.append(op.source)
        else:
            from .ops import BUILTIN_OPS

            if op.name in BUILTIN_OPS:
                paths.append(str(Path(__file__).parent / "ops" / "builtin.py"))
    return list(dict.fromkeys(paths))


def _files(paths):
    for p in paths:
        p = Path(p)
        if p.is_file():
            yield p
        elif p.is_dir():
            for root, _, names in os.walk(p):
                for n in sorted(names):
                    yield Path(root) / n


def find_references(name: str, paths, limit: int = 3) -> list:
    """Files under ``paths`` whose bytes contain ``name`` (compiled libraries included: Triton
    reads many switches from C++). At most ``limit`` hits."""
    needle, hits = name.encode(), []
    for f in _files(paths):
        try:
            with open(f, "rb") as fh:
                if os.fstat(fh.fileno()).st_size == 0:
                    continue
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    if m.find(needle) >= 0:
                        hits.append(str(f))
        except (OSError, ValueError):
            continue
        if len(hits) >= limit:
            break
    return hits


def switch_guard(sides, ops, sources=None) -> list:
    """For each variable that differs between the sides: where it is referenced.

    :return: ``[{"name", "found": [files], "searched": [paths]}]``.
    """
    a, b = sides
    # the task candidate differs by design and is read by zlf task, not by the code under test
    keys = sorted(k for k in set(a.env) | set(b.env) if a.env.get(k) != b.env.get(k) and k not in NOT_SWITCHES)
    if not keys:
        return []
    searched = list(sources) if sources else default_switch_sources(sides, ops)
    return [{"name": k, "found": find_references(k, searched), "searched": searched} for k in keys]


def switch_guard_messages(results) -> list:
    return [f"switch {r['name']} is not referenced anywhere in {', '.join(r['searched']) or '(nothing searched)'}: "
            "both sides may run identical code (give --switch-source PATH if it is read elsewhere)"
            for r in results if not r["found"]]


def ir_guard(campaign, reported_ops) -> list:
    """After the campaign: per op, whether side B's compiled IR differs from side A's."""
    if campaign.data.get("aa"):
        return []
    try:
        from .irtree import CHANGED, IDENTICAL, shape_status
    except ImportError:
        return []
    lines = []
    for op in reported_ops:
        for k in range(1, campaign.planned_rounds() + 1):
            ra, rb = campaign.find(op, k, "A"), campaign.find(op, k, "B")
            if not (ra and rb and ra["status"] == OK and rb["status"] == OK):
                continue
            status = shape_status(campaign.run_dir(ra), campaign.run_dir(rb))
            if not status:
                break  # no IR dumped (ir_dump not active)
            changed = [s for s, v in status.items() if v != IDENTICAL]
            if not changed:
                lines.append(f"!!! {op}: the switch changed NO compiled code -- IR identical on all {len(status)} shapes "
                             f"(r{k}_A vs r{k}_B): any delta is noise, not the compiler change")
            else:
                n_changed = sum(1 for v in status.values() if v == CHANGED)
                lines.append(f"{op}: IR differs between A and B on {len(changed)} of {len(status)} shapes "
                             f"({n_changed} changed, the rest on one side only)")
            break
    return lines


def busy_backend(session, backend_name, device):
    """The backend object whose ``busy_warnings()`` guards --require-idle, never set up here
    (the campaign process must not hold the GPU it is measuring)."""
    known = session.backends()
    name = backend_name or os.environ.get("ZLF_BACKEND")
    if name:
        if name not in known:
            raise UsageError(f"unknown backend {name!r}; known: {', '.join(sorted(known))}")
        cls = known[name]
    else:
        available = [c for c in known.values() if c.is_available()]
        cls = max(available, key=lambda c: c.priority)
    return cls(device)


def wait_until_idle(backend, wait_s: float, poll_s: float = 5.0) -> list:
    """``[]`` once the device is idle, or the last warnings after ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        warnings = backend.busy_warnings()
        if not warnings or time.monotonic() >= deadline:
            return warnings
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


# ----------------------------------------------------------------------------- statistics over run dirs
def collect(campaign, rounds=None):
    """Per-point values of every op whose every planned run (up to ``rounds``) finished ok.

    :return: ``(values, blockers, remarks, excluded)``: ``{point: (A values, B values)}`` of the
        campaign's metric (:mod:`zlf.metrics`; time in ms by default) over the rounds
        where both runs of the point's op are done; ``{point: why no direction}``;
        ``{point: [remarks]}``; ``{point: why left out}``.
    """
    rounds = rounds or campaign.planned_rounds()
    metric = campaign.data.get("metric") or metrics.DEFAULT
    # docs/ab.md: a report missing rounds reads exactly like a complete one
    failed = {**campaign.failed_ops(), **campaign.incomplete_ops(rounds)}
    values, blockers, remarks, excluded = {}, {}, {}, {}
    for op in campaign.ops:
        if op.name in failed:
            continue
        per_point: dict = {}
        timers: dict = {}
        why_none: dict = {}
        twice: dict = {}
        done_rounds = []
        for k in range(1, rounds + 1):
            pair = [campaign.find(op.name, k, s) for s in ("A", "B")]
            if not all(r and r["status"] == OK for r in pair):
                continue
            done_rounds.append(k)
            by_side = {}
            for side, r in zip(("A", "B"), pair):
                records, _ = RunDir(campaign.run_dir(r)).records()
                by_side[side] = {rec.point: rec for rec in records}
                for point in duplicate_points(records):
                    twice.setdefault(point, f"point id appears twice in r{k}_{side}/{RESULTS}: not paired")
                for rec in records:
                    slot = per_point.setdefault(rec.point, {})
                    slot[(k, side)] = metrics.value(rec, metric)
                    if slot[(k, side)] is None:
                        why_none.setdefault(rec.point, metrics.missing(rec, metric))
                    if rec.timer:
                        timers.setdefault(rec.point, set()).add(rec.timer)
                    for m in rec.markers:
                        word = m.split(" ")[0]
                        remarks.setdefault(rec.point, [])
                        if f"{word} r{k}_{side}" not in remarks[rec.point]:
                            remarks[rec.point].append(f"{word} r{k}_{side}")
            for point, rec_a in by_side["A"].items():  # A and B of a round at different clock states
                why = metrics.clock_differs(rec_a, by_side["B"].get(point))
                if why:
                    remarks.setdefault(point, []).append(f"CLOCK_DIFFERS r{k} ({why})")
        for point, slot in per_point.items():
            if point in twice:
                excluded[point] = twice[point]
                continue
            missing = [f"r{k}_{s}" for k in done_rounds for s in ("A", "B") if slot.get((k, s)) is None]
            if missing:
                excluded[point] = f"no {metric} in " + ", ".join(missing) + (
                    f" ({why_none[point]})" if metric != metrics.DEFAULT and point in why_none else "")
                continue
            if not done_rounds:
                continue
            values[point] = ([slot[(k, "A")] for k in done_rounds], [slot[(k, "B")] for k in done_rounds])
            if len(timers.get(point, ())) > 1:
                blockers[point] = "mixed timers: " + ", ".join(sorted(timers[point]))
    return values, blockers, remarks, excluded


def load_noise(noise_from) -> dict:
    """``{point: Noise as JSON}`` from an A/A campaign directory (``--noise-from``)."""
    if not noise_from:
        return {}
    path = Path(noise_from) / SUMMARY_JSON
    if not path.is_file():
        raise UsageError(f"--noise-from {noise_from!r}: no {SUMMARY_JSON} (not a finished zlf ab campaign)")
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        raise UsageError(f"--noise-from {noise_from!r}: {SUMMARY_JSON} is not JSON ({exc})") from None
    if not doc.get("aa"):
        raise UsageError(f"--noise-from {noise_from!r} is not an A/A campaign (run zlf ab --aa)")
    noise = stats.aa_entries(doc.get("points", []))
    if not noise:
        raise UsageError(f"--noise-from {noise_from!r}: no point has two rounds to estimate noise from")
    return noise


def settings_of(campaign) -> stats.Settings:
    """The rule's knobs as stored; a campaign from before the one-threshold rule kept a SAME
    margin beside --min-effect: its --min-effect is the threshold now."""
    s = campaign.data["statistics"]
    return stats.Settings(alpha=s["alpha"], min_effect_pct=s.get("min_effect_pct", _DEFAULTS.min_effect_pct),
                          trim=s.get("trim"), pairing=s.get("pairing", stats.AUTO))


def spending_plan(campaign) -> "stats.SpendingPlan | None":
    s = campaign.data["statistics"]
    if not s.get("until_confident"):
        return None
    return stats.SpendingPlan(s["first_look"], s["max_rounds"], s["alpha"])


def look_level(campaign, rounds: int) -> float:
    """The (one-sided, before Holm) level of the analysis after ``rounds`` rounds: alpha, or
    the O'Brien–Fleming spending level of that look when adaptive."""
    plan = spending_plan(campaign)
    return campaign.data["statistics"]["alpha"] if plan is None else plan.level(rounds)


def _frozen(campaign) -> dict:
    """``{point: (verdict, rounds)}`` decided at earlier looks of an adaptive campaign."""
    return {p: tuple(v) for p, v in (campaign.data.get("frozen") or {}).items()}


def noise_of(campaign) -> dict:
    """The A/A's per-point entries (per-round times) that ``--noise-from`` stored."""
    return dict(campaign.data["statistics"].get("noise") or {})


def analyse(campaign, rounds=None):
    rounds = rounds or campaign.planned_rounds()
    values, blockers, remarks, excluded = collect(campaign, rounds)
    settings, noise, plan = settings_of(campaign), noise_of(campaign), spending_plan(campaign)
    if plan is None:
        results = stats.analyse(values, settings, noise=noise, notes=blockers)
    else:
        results = stats.look(values, settings, plan, _frozen(campaign), noise=noise, notes=blockers)
    return results, remarks, excluded, look_level(campaign, rounds)


# ----------------------------------------------------------------------------- driving the runs
class Printer:
    """Progress lines on stderr: one per finished run, with the time left."""

    def __init__(self, campaign):
        self.campaign = campaign
        self.t0 = time.monotonic()
        self.seconds = []

    def done(self, run) -> None:
        runs = self.campaign.runs
        finished = sum(1 for r in runs if r["status"] in (OK, FAILED, SKIPPED))
        if run.get("seconds"):
            self.seconds.append(run["seconds"])
        left = len(runs) - finished
        eta = f", ~{_clock(left * sum(self.seconds) / len(self.seconds))} left" if self.seconds and left else ""
        what = {OK: paint("ok", "green", sys.stderr), FAILED: paint("FAILED", "red", sys.stderr)}.get(run["status"], run["status"])
        took = f" {run['seconds']:.1f}s" if run.get("seconds") else ""
        error = f" ({clean(run['error'])})" if run.get("error") else ""
        flags = paint(" [busy/throttled]", "yellow", sys.stderr) if run.get("flags") else ""
        where = f" on {gpu_label(run['gpu'])}" if run.get("gpu") else ""
        print(f"[{finished}/{len(runs)}] {clean(run['op'])} r{run['round']}_{run['side']} {what}{where}{took}{flags}{error}"
              f"  (elapsed {_clock(time.monotonic() - self.t0)}{eta})", file=sys.stderr, flush=True)

    def line(self, text: str) -> None:
        print(clean_lines(text), file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Stopped(Exception):
    """The campaign cannot go on now (the device stayed busy); --resume continues it."""


def run_pending(campaign, printer, busy=None, idle_wait=60.0) -> None:
    """Run the first pending run (with its shared process's other ops) until none is left: a
    shared process that fails an op sends that op's round back to the pending runs, alone."""
    while True:
        run = campaign.next_run() if campaign.shared else next(
            (r for r in campaign.runs if r["status"] not in (OK, FAILED, SKIPPED)), None)
        if run is None:
            return
        failed = campaign.failed_ops().get(run["op"])
        if failed:
            run.update(status=SKIPPED, error=f"op failed in r{failed['round']}_{failed['side']}")
            campaign.save()
            printer.done(run)
            continue
        if busy is not None:
            warnings = wait_until_idle(busy, idle_wait)
            if warnings:
                raise Stopped(f"--require-idle: device still busy after {idle_wait:g}s before "
                              f"{run['op']} r{run['round']}_{run['side']}: {'; '.join(warnings)}")
        if campaign.shares(run):
            group = next(g for g in campaign.shared_groups() if run in g)
            for r in campaign.execute_shared(group):
                if r["status"] == OK:
                    printer.done(r)
                elif r.get("alone") and r.get("shared_error"):
                    printer.line(f"{r['op']} r{r['round']}_{r['side']}: {r['shared_error']}; its round runs alone")
            continue
        campaign.execute(run)
        printer.done(run)


class Scaled:
    """Pending runs as work units on an executor (``--gpus`` / ``--executor ray``); per-worker
    counts summed over the batches of an adaptive campaign."""

    def __init__(self, executor, unit: str = "pair"):
        self.executor = executor
        self.unit = unit
        self.stats: dict = {}

    def run_pending(self, campaign, printer) -> None:
        # a shared process that fails an op sends that op's round back, alone: another batch
        while True:
            done = _settled(campaign)
            self._batch(campaign, printer)
            if not campaign_units(campaign, self.unit):
                return
            if _settled(campaign) == done:
                raise Stopped("runs left that no batch can finish: "
                              + ", ".join(f"{r['op']} r{r['round']}_{r['side']}" for r in campaign.runs
                                          if r["status"] in (PENDING, RUNNING)))

    def _batch(self, campaign, printer) -> None:
        units = campaign_units(campaign, self.unit)
        if not units:
            return
        scheduler = Scheduler(units, retries=self.executor.retries)
        try:
            self.executor.run(CampaignJob(campaign, printer), scheduler)
        finally:
            self._add(scheduler)
            campaign.data["workers"] = list(self.stats.values())
            campaign.save()
        missing = scheduler.given_up()
        left = scheduler.queued()
        if missing or left:
            why = "; ".join(f"{u}: {r}" for u, r in missing.items()) or "no worker left"
            raise Stopped(f"{len(missing) + len(left)} unit(s) not run ({why})")
        pending = [f"{r['op']} r{r['round']}_{r['side']}" for r in campaign.runs
                   if r["status"] in (PENDING, RUNNING) and not (r.get("alone") or campaign.shares(r))]
        if pending:  # a run interrupted on its own (exit 130) is pending again, not failed
            raise Stopped(f"{len(pending)} run(s) not finished: {', '.join(pending)}")

    def _add(self, scheduler) -> None:
        for row in scheduler.summary_rows():
            old = self.stats.get(row["worker"])
            if old is None:
                self.stats[row["worker"]] = row
                continue
            for k in ("units", "runs", "seconds", "failed_runs", "lost"):
                old[k] += row[k]
            old["identity"] = old["identity"] or row["identity"]

    def table(self) -> str:
        from tabulate import tabulate

        rows = [[gpu_label(r["worker"]), r["identity"] or "-", r["units"], r["runs"], _clock(r["seconds"]), r["failed_runs"], r["lost"]]
                for r in self.stats.values()]
        return tabulate(rows, headers=["worker", "device", "units", "runs", "busy", "failed runs", "lost units"])


def _settled(campaign) -> tuple:
    """How far the runs are: finished ones and rounds sent alone (a batch must move one of them)."""
    return (sum(1 for r in campaign.runs if r["status"] in (OK, FAILED, SKIPPED)),
            sum(1 for r in campaign.runs if r.get("alone")))


def drive(campaign, printer, busy=None, idle_wait=60.0, scaled=None) -> None:
    """Run every pending run; when adaptive, look after each round, freeze the verdicts a look
    decides, and add a round only for the ops with an undecided point."""
    s = campaign.data["statistics"]
    while True:
        if scaled is not None:
            scaled.run_pending(campaign, printer)
        else:
            run_pending(campaign, printer, busy, idle_wait)
        if not s.get("until_confident"):
            return
        n = campaign.planned_rounds()
        values, blockers, _, _ = collect(campaign, n)
        owner = _point_ops(campaign)
        results, frozen, extend = stats.adaptive_step(
            values, settings_of(campaign), spending_plan(campaign), _frozen(campaign),
            lambda point: owner.get(point, point.split("/")[0]), noise_of(campaign), blockers)
        alpha = look_level(campaign, n)
        campaign.data["frozen"] = {p: list(v) for p, v in frozen.items()}
        extend = [o.name for o in campaign.ops if o.name in extend and _op_rounds(campaign, o.name) == n]
        looks = campaign.data["looks"]
        if not looks or looks[-1]["rounds"] != n:
            looks.append({"rounds": n, "alpha": alpha, "points": len(results), "decided": len(frozen),
                          "undecided": len(results) - len(frozen), "ops_extended": extend, "at": now()})
        campaign.save()
        printer.line(f"look after round {n}: level {alpha:.3g}, {len(results) - sum(r.verdict == stats.UNSURE for r in results)} "
                     f"of {len(results)} points decided" + (f"; another round for {', '.join(extend)}" if extend and n < s["max_rounds"] else ""))
        if not extend or not results:
            return
        campaign.add_round(n + 1, ops=extend)


def _point_ops(campaign) -> dict:
    """``{point: op name}`` from each op's first finished run."""
    out = {}
    for op in campaign.ops:
        run = next((r for r in campaign.runs if r["op"] == op.name and r["status"] == OK), None)
        if run is not None:
            records, _ = RunDir(campaign.run_dir(run)).records()
            out.update({rec.point: op.name for rec in records})
    return out


def _op_rounds(campaign, op: str) -> int:
    return max((r["round"] for r in campaign.runs if r["op"] == op), default=0)


# ----------------------------------------------------------------------------- the command
def _new_campaign(args, session):
    a, b = build_sides(args)
    if args.task:
        if args.ops:
            raise UsageError(f"give either OPs or --task PKG_DIR, not both ({' '.join(args.ops)})")
        if args.dtype:
            raise UsageError("--dtype does not apply to --task (the package generates its inputs)")
        ops = [OpSpec.task(t) for t in args.task]
    else:
        for dest, flag in TASK_OPTIONS:
            if dest != "time_limit" and getattr(args, dest, None) is not None:
                raise UsageError(f"{flag} needs --task PKG_DIR")
        ops = [OpSpec.parse(t) for t in (args.ops or ["add", "softmax", "matmul"])]
    if any(o.run_spec in ("builtin", "all") for o in ops):
        raise UsageError("name the ops (add softmax matmul) instead of 'builtin': each op gets its own runs")
    names = [o.name for o in ops]
    if SHARED in names:
        raise UsageError(f"op name {SHARED!r} is where shared processes write: rename the op (NAME:FILE)")
    for name in names:  # each op's runs live in <campaign>/<op name>/
        if safe_name(name, "") != name:
            raise UsageError(f"op name {name!r} cannot name a directory of the campaign "
                             "(letters, digits and _ . + - only, not starting with a dot)")
    if len(set(names)) != len(names):
        raise UsageError(f"op named twice: {sorted({n for n in names if names.count(n) > 1})[0]!r}")
    for o in ops:
        if o.source and not os.path.exists(o.source):
            raise UsageError(f"op file {o.source!r} not found")
    first = args.rounds if args.rounds is not None else (DEFAULT_FIRST_LOOK if args.until_confident else DEFAULT_ROUNDS)
    if first < 1:
        raise UsageError("--rounds must be at least 1")
    if args.until_confident and args.max_rounds < first:
        raise UsageError(f"--max-rounds {args.max_rounds} is below the first look ({first} rounds)")
    if not 0 < args.alpha < 1:
        raise UsageError("--alpha must be between 0 and 1")
    if args.margin is not None:
        warn("--margin is deprecated: one threshold now serves SAME and both directions; using it as --min-effect")
        args.min_effect = args.margin
    if not 0 < args.min_effect < 100:
        raise UsageError("--min-effect must be a percentage between 0 and 100")
    if first < stats.MIN_ROUNDS:
        warn(f"!!! {first} round(s): fewer than {stats.MIN_ROUNDS} rounds give no verdict (every point UNSURE or "
             f"without an interval); use --rounds {stats.MIN_ROUNDS} or more")
    noise = load_noise(args.noise_from)
    replay = any(i.name == REPLAY_EXTENSION and i.status == "active" for i in session.hooks.infos)
    data = {
        "label": args.label or ("aa" if args.aa else (args.switch or (ops[0].name if args.task else "ab"))),
        "command": ["zlf", *sys.argv[1:]],
        "cwd": os.getcwd(),
        "driver_pid": os.getpid(),
        "aa": bool(args.aa),
        "switch": args.switch,
        "sides": [a.to_json(), b.to_json()],
        "ops": [o.to_json() for o in ops],
        "run_args": pass_through_args(args, session.hooks) + task_args(args) + run_limit_args(args),
        "extension_args": extension_args(session.hooks, need_task=bool(args.task)),
        "scale": scale_options(args, None),
        "replay": replay,
        "backend": args.backend,
        "device": args.device,
        "require_idle": bool(args.require_idle),
        "idle_wait": args.idle_wait,
        "fail_on_slower": bool(args.fail_on_slower),
        "metric": args.metric or metrics.DEFAULT,
        # startup (imports, plugins, device queries) once per round and side for all ops
        "process": PER_OP if (args.process_per_op or args.task or args.unit == "op") else SHARED_PROCESS,
        "statistics": {
            "alpha": args.alpha, "min_effect_pct": args.min_effect, "pairing": args.pairing,
            "trim": None, "spending": "obrien-fleming",
            "noise_from": os.path.abspath(args.noise_from) if args.noise_from else None, "noise": noise,
            "until_confident": bool(args.until_confident), "first_look": first,
            "max_rounds": args.max_rounds if args.until_confident else first,
        },
    }
    _preflight(data, session)  # refuse before anything is written: a refused campaign cannot be resumed
    guard = switch_guard((a, b), ops, args.switch_source)
    data["guards"] = {"switch_source": guard}
    if args.dry_run:
        _print_dry_run(data, a, b, ops, guard)
        return None
    for line in switch_guard_messages(guard):
        warn(line)
    label = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in data["label"])
    campaign = Campaign.create(args.out, label, data)
    if not campaign.data.get("triton_cache"):
        campaign.data["triton_cache"] = os.path.abspath(args.triton_cache) if args.triton_cache else str(campaign.path / "triton_cache")
        campaign.seal()  # the cache is where Triton loads compiled launchers from: signed too
    if not campaign.data.get("signature"):
        from .campaign import key_path

        warn(f"cannot create the campaign signing key {key_path()}: this campaign cannot be resumed")
    for k in range(1, first + 1):
        campaign.add_round(k)
    return campaign


def _print_dry_run(data, a, b, ops, guard) -> None:
    print(f"side A: {a.describe()}\nside B: {b.describe()}")
    s = data["statistics"]
    rounds = f"{s['first_look']} rounds" + (f", then up to {s['max_rounds']} until confident" if s["until_confident"] else "")
    print(f"ops: {', '.join(o.name for o in ops)}; {rounds}; autotune replay: {'on' if data['replay'] else 'off'}")
    extra = " ".join(data["extension_args"] + data["run_args"])
    if data.get("process") == SHARED_PROCESS:
        print("one process per round and side for all ops (--process-per-op: one per op):")
        print(f"  zlf run {' '.join(o.run_spec for o in ops)} {extra}".rstrip())
    else:
        for o in ops:
            print(f"  zlf {o.command} {o.run_spec} {extra}".rstrip())
    for r in guard:
        where = ", ".join(r["found"]) if r["found"] else "NOT FOUND"
        print(f"switch {r['name']} referenced in: {where}")
    for line in switch_guard_messages(guard):
        warn(line)


def main(args, session) -> int:
    from . import ab_report

    if args.resume:
        campaign = Campaign.open(args.resume)
        scale = scale_options(args, campaign.data.get("scale"))
        pid = campaign.data.get("driver_pid")
        if campaign.data["status"] == C_RUNNING and pid and pid != os.getpid() and _alive(pid):
            raise UsageError(f"campaign {args.resume!r} is still being run by process {pid}")
        if campaign.data["status"] != C_COMPLETE or any(r["status"] in (PENDING, RUNNING) for r in campaign.runs):
            campaign.check_resume({"A": args.a_python, "B": args.b_python})  # it will start runs
        _preflight({**campaign.data, "scale": scale}, session)
        if args.metric:
            campaign.data["metric"] = args.metric
        shutil.rmtree(campaign.path / SHARED / ".staging", ignore_errors=True)  # a shared process cut short
        if scale != campaign.data.get("scale"):
            campaign.data["scale"] = scale
            campaign.seal()  # given on this command line: trusted as a new campaign's would be
        stale = [r for r in campaign.runs if r["status"] in (PENDING, RUNNING)]
        for run in stale:
            run.update(status=PENDING, started=None)  # a run in flight when it stopped is re-run whole
        if stale or campaign.data["status"] != C_COMPLETE:
            campaign.data.update(driver_pid=os.getpid(), status=C_RUNNING)
        campaign.save()
    else:
        from .cli import check_run_options

        check_run_options(args)
        campaign = _new_campaign(args, session)
        if campaign is None:
            return 0
    printer = Printer(campaign)
    d = campaign.data
    a, b = campaign.sides["A"], campaign.sides["B"]
    pending = sum(1 for r in campaign.runs if r["status"] in (PENDING, RUNNING))
    printer.line(f"campaign {campaign.path}\n  A: {a.describe()}\n  B: {b.describe()}\n"
                 f"  {len(campaign.ops)} op(s) x {campaign.planned_rounds()} rounds x 2 sides; {pending} run(s) to go; "
                 f"autotune replay {'on' if d['replay'] else 'OFF (autotune_replay not active: every run tunes for itself)'}")
    busy = busy_backend(session, d.get("backend"), d.get("device", 0)) if d.get("require_idle") else None
    scaled = _scaled(d, session)
    if scaled is not None:
        printer.line(f"  {scaled.executor.describe()}; unit of work: {'a round pair (A and B on one GPU)' if scaled.unit == 'pair' else 'an op'}")
    try:
        drive(campaign, printer, busy, d.get("idle_wait", 60.0), scaled)
    except KeyboardInterrupt as exc:
        campaign.data.update(status=stop_word(exc))  # "interrupted" or "terminated" (SIGTERM); resumable
        campaign.save()
        print(f"\n{stop_word(exc)}; finished runs kept -- continue with: zlf ab --resume {campaign.path}", file=sys.stderr)
        return stop_code(exc)
    except Stopped as exc:
        campaign.data.update(status=C_INTERRUPTED)
        campaign.save()
        print(f"zlf: {exc}\ncontinue with: zlf ab --resume {campaign.path}", file=sys.stderr)
        return 1
    if campaign.data["status"] != C_COMPLETE or not campaign.data.get("finished"):
        campaign.data["finished"] = now()
    campaign.data["status"] = C_COMPLETE
    campaign.save()
    results, remarks, excluded, alpha = analyse(campaign)
    unreported = {**campaign.failed_ops(), **campaign.incomplete_ops()}
    reported = [o.name for o in campaign.ops if o.name not in unreported]
    text = ab_report.write(campaign, results, remarks, excluded, alpha, ir_guard(campaign, reported))
    print(text)
    if scaled is not None and scaled.stats:
        table = "per worker (GPU):\n" + scaled.table()
        print(table)
        with open(campaign.path / SUMMARY_LOG, "a") as f:
            f.write("\n" + table + "\n")
    print(f"campaign dir: {campaign.path}")
    _after_campaign(campaign, results, args, session)
    if unreported:
        return 1
    if d.get("fail_on_slower") and any(r.verdict == stats.SLOWER for r in results):
        return 1
    return 0


def _after_campaign(campaign, results, args, session) -> None:
    """Extensions' work on the finished campaign (``after_campaign``): after every timing run."""
    session.hooks.after_campaign(campaign, results, args, session)


def _preflight(data: dict, session) -> None:
    """Every check of the option combination that can refuse a campaign (UsageError), made before
    campaign.json is created or rewritten."""
    _scaled(data, session)
    if data.get("require_idle"):
        busy_backend(session, data.get("backend"), data.get("device", 0))


def _scaled(d: dict, session) -> "Scaled | None":
    """The executor of a campaign (its data) with ``--gpus`` or ``--executor ray``; None for the plain path."""
    opts = d.get("scale")
    if not opts:
        return None
    if d.get("device") not in (None, 0) and opts.get("gpus"):
        raise UsageError("--gpus pins each worker to its GPU: drop --device")
    if d.get("require_idle"):
        raise UsageError("--require-idle is not supported with --gpus / --executor ray yet")
    pin = pin_variable(session, d.get("backend"))
    executor = make_executor(opts.get("executor"), opts.get("gpus") or [], pin, opts.get("retries"), opts.get("ray_address"))
    return Scaled(executor, opts.get("unit") or "pair")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
