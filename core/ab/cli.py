"""``zlf ab``: the command line of a campaign, its creation and its main loop.

Side B is the change, side A the baseline; odd rounds run A then B, even rounds B then A. What
extensions add (an autotune record every later run replays, task packages as ops, IR guards) comes
through the ``campaigns`` hooks (:mod:`zlf.hookspecs`). The statistics and the verdict rule are
in :mod:`zlf.stats` and docs/ab.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys

import attrs

from .. import controls as ctl
from .. import metrics, output, readers, stats
from ..console import clean, warn
from ..errors import UsageError
from ..compare import GATE
from ..executors import add_scale_arguments, make_executor, parse_gpus, pin_variable
from ..options import SECONDS, SEED, CommandTraits, Number, deprecated, env_name
from ..procs import stop_code, stop_word
from ..redact import REDACTED
from ..rundir import RunDir, disk_full
from ..streams import last_word
from . import library, report
from .analysis import decide_campaign, load_noise
from .campaign import KEY_FILE, Campaign, Driving, OpSpec, Statistics, key_path
from .driving import Printer, Scaled, Stopped, drive
from .extending import CampaignOptions, CampaignPlan
from .guards import busy_backend, campaign_guards, switch_guard, switch_guard_messages
from .layout import (CAMPAIGN, CONFIGS, C_COMPLETE, C_DISK_FULL, C_INTERRUPTED, C_RUNNING, FAILED, LOGS, OK, PENDING,
                     PER_OP, PLOT, REPORT, RUNNING, SHARED, SHARED_PROCESS, SKIPPED, STAGING, SUMMARY_JSON,
                     SUMMARY_LOG, now)
from .sides import CAMPAIGN_OWN, build_sides, side_configs

EPILOG = """\
examples:
  zlf ab --switch DISABLE_MMA_V3 matmul          DISABLE_MMA_V3=0 on A, =1 on B, 6 rounds
  zlf ab --aa --rounds 6                         A/A over the built-in suite: the run-to-run noise
  zlf ab --switch X --noise-from runs/ab_aa_...  pool that A/A's noise into the intervals
  zlf ab --a-python venvA/bin/python --b-python venvB/bin/python softmax
  zlf ab --switch X --until-confident --max-rounds 12
  zlf ab --resume runs/ab_X_20250101-120000      finish an interrupted campaign
  zlf ab --switch X --metric cycles matmul       decide on time x measured SM clock (power-capped GPUs)
  zlf ab --switch X --controls none matmul       no canaries: decide on the times as measured
  zlf ab --switch X --gpus 0,1,2,3               one worker per GPU; a round's A and B share a GPU
  zlf ab --switch X --process-per-op a b c       a zlf run process per op (default: one per round and side)
  zlf ab --switch X --executor ray --ray-address HEAD:6379   Ray tasks of one GPU each
  zlf ab --switch X --library ops.txt            A/B a library: every op listed in ops.txt, one per line
  zlf ab --switch X --library ops.txt --sample 40 --sample-seed 22   a seeded sample of it
  zlf ab --status runs/ab_X_20250101-120000      the table so far of a running or stopped campaign
verdicts (B against A): FASTER, SLOWER, SAME, UNSURE -- the rule is in docs/ab.md
exit codes: 0 done, 1 an op failed (--library: on B only) (or --fail-if-slower and a point is SLOWER), 2 bad input, 130 interrupted,
            143 terminated (SIGTERM; --resume continues either)
"""

VERDICTS_LINE = "verdicts (B against A)"


def add_example(parser: argparse.ArgumentParser, line: str) -> None:
    """Add an example line to ``zlf ab --help`` (an extension's, from ``add_campaign_options``)."""
    head, sep, tail = (parser.epilog or "").partition(VERDICTS_LINE)
    parser.epilog = f"{head}  {line}\n{sep}{tail}" if sep else f"{head}  {line}\n"


DEFAULT_ROUNDS = 6
#: first look of an adaptive campaign when --rounds is not given.
DEFAULT_FIRST_LOOK = 3
DEFAULT_MAX_ROUNDS = 12
#: a library campaign's per-point time limit unless --time-limit is given (a hung op costs this,
#: three times: in its shared process, then alone on each side)
LIBRARY_TIME_LIMIT = 60.0
_DEFAULTS = stats.Settings()
UNITS = ("pair", "op")


#: what zlf ab does: its runs time points, make inputs and plan shapes, in zlf run processes it
#: hands its run options to; and it runs campaigns
TRAITS = CommandTraits(times_points=True, makes_inputs=True, plans_shapes=True, forwards_run_options=True,
                       runs_campaigns=True)
#: --rounds and --max-rounds
ROUNDS = Number(int, 1, 1000, unit="rounds")
#: --min-effect: a percentage strictly between 0 and 100
EFFECT = Number(float, 0, 100, low_open=True, high_open=True, unit="percent")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("ops", nargs="*", metavar="OP",
                        help="op, OP:OP_FILE, FILE.py[::NAME], or an extension's spelling such as OP:WORD::NAME (default: the built-in suite add softmax matmul)")
    s = parser.add_argument_group("sides (combinable; B is the change, A the baseline)")
    s.add_argument("--switch", type=env_name, metavar="NAME", help="environment variable set to 0 on A and 1 on B")
    s.add_argument("--a-env", action="append", default=[], metavar="K=V", help="extra environment of side A (repeatable)")
    s.add_argument("--b-env", action="append", default=[], metavar="K=V", help="extra environment of side B (repeatable)")
    s.add_argument("--a-python", metavar="PATH", help="interpreter of side A (a compiler build with zlf installed)")
    s.add_argument("--b-python", metavar="PATH", help="interpreter of side B")
    s.add_argument("--aa", action="store_true", help="A/A calibration: B is a copy of A; measures the noise floor")
    r = parser.add_argument_group("rounds")
    r.add_argument("--rounds", type=ROUNDS, metavar="N",
                   help=f"rounds of A+B runs (default {DEFAULT_ROUNDS}; with --until-confident the first look, default {DEFAULT_FIRST_LOOK})")
    r.add_argument("--until-confident", action="store_true",
                   help="look after every round; a decided point keeps its verdict and only ops with an undecided "
                        "point get another round, up to --max-rounds (O'Brien-Fleming alpha spending keeps the error rate)")
    r.add_argument("--max-rounds", type=ROUNDS, default=DEFAULT_MAX_ROUNDS, metavar="M",
                   help=f"upper bound of --until-confident (default {DEFAULT_MAX_ROUNDS})")
    st = parser.add_argument_group("statistics (docs/ab.md)")
    st.add_argument("--alpha", type=Number(float, 0, 1, low_open=True, high_open=True), default=_DEFAULTS.alpha, metavar="A",
                    help="chance of any wrong verdict in the whole campaign (default 0.05)")
    st.add_argument("--min-effect", type=EFFECT, default=_DEFAULTS.min_effect_pct, metavar="PCT",
                    help="the effect threshold delta, percent (default 1): SLOWER/FASTER need the whole interval "
                         "beyond +-delta, SAME inside it")
    deprecated(st, "--margin", "--min-effect", type=EFFECT, default=None, dest="margin")
    st.add_argument("--pairing", choices=stats.PAIRINGS, default=stats.AUTO,
                    help="paired per-round deltas or unpaired sides (default auto: chosen from the data's variances)")
    st.add_argument("--noise-from", metavar="DIR",
                    help="an A/A campaign (zlf ab --aa) whose per-point variance is pooled into the intervals")
    st.add_argument("--controls", choices=ctl.MODES, default=None,
                    help="what measures each process's factor (a power-capped GPU runs a whole process in one clock "
                         "mode), which is then taken out of every point of that process (docs/ab.md, Controls): canary (torch matmul and add, "
                         "built by no Triton, timed in every process), unchanged (points whose compiled kernels are "
                         "identical on both sides, as an IR extension reports them), auto (default: both, where there are any), none (as measured). "
                         "Only with one interpreter for both sides; the report lists the factors, the controls and any "
                         "control that moved. With --resume: re-decide a campaign with other controls")
    st.add_argument("--metric", choices=metrics.NAMES, default=None,
                    help="what the verdicts decide on: time (default), cycles (time x measured SM clock), "
                         "wall (host wall-clock per call); with --resume: re-decide a campaign on another metric")
    g = parser.add_argument_group("guards")
    g.add_argument("--switch-source", action="append", metavar="PATH",
                   help="where the switch must be referenced (repeatable; default: each side's triton package and the op sources)")
    g.add_argument("--require-idle", action="store_true", help="refuse to start a run while the device is busy or throttled")
    g.add_argument("--idle-wait", type=Number(float, 0, SECONDS, unit="seconds"), default=60.0, metavar="S",
                   help="with --require-idle: how long to wait for an idle device before stopping (default 60)")
    o = parser.add_argument_group("output")
    o.add_argument("--out", default="runs", metavar="PARENT", help="parent of the campaign directory (default: runs/)")
    o.add_argument("--name", dest="label", metavar="LABEL",
                   help="campaign directory label (default: the switch, 'aa' or 'ab')")
    deprecated(o, "--label", "--name", dest="label")
    o.add_argument("--resume", metavar="DIR", help="complete an interrupted campaign (its own options are used)")
    o.add_argument("--triton-cache", metavar="DIR",
                   help="parent of the per-side Triton caches, to reuse them across campaigns (default: inside the campaign)")
    o.add_argument("--process-per-op", action="store_true",
                   help="one zlf run process per op, round and side (default: one per round and side for all ops; "
                        "an op that fails there is re-run alone)")
    o.add_argument("--fail-if-slower", type=GATE, nargs="?", const=0.0, metavar="PCT",
                   help="exit 1 when a point is SLOWER and its delta is more than PCT percent (default 0)")
    deprecated(o, "--fail-on-slower", "--fail-if-slower", dest="fail_if_slower", action="store_const", const=0.0)
    output.add_format_argument(o)
    o.add_argument("--dry-run", action="store_true", help="print the sides, the runs and the guards; run nothing")
    lib = parser.add_argument_group("a whole op library (docs/ab.md, \"A/B a library\")")
    lib.add_argument("--library", metavar="SOURCE",
                     help="A/B every op of SOURCE: an op source an active extension knows (the examples below name "
                          "them) or a file with one OP per line; OP "
                          "arguments pick ops of it. Screening rounds (--rounds, default 3) cover every point, then "
                          "only the ops with a point not yet decided get more rounds (up to --max-rounds); the other "
                          "side of a failed run still runs; per-point --time-limit default 60; one table for the "
                          "library, findings first (an op that fails on B only, then verdicts by evidence)")
    lib.add_argument("--sample", type=Number(int, 1, 10**6, unit="ops"), metavar="N",
                     help="with --library: a random sample of N of its ops (random.Random(--sample-seed).sample)")
    lib.add_argument("--sample-seed", type=SEED, default=None, metavar="S",
                     help="with --sample: the seed of its sample (default 0)")
    lib.add_argument("--method", choices=stats.METHODS, default=None,
                     help="with --library: the error rate the library's directions are held to: bh (default: the "
                          "false discovery rate, Benjamini-Hochberg), by (the same under any dependence, "
                          "Benjamini-Yekutieli), holm (the chance of any wrong direction, family-wise; SAME stays "
                          "per point under every method)")
    lib.add_argument("--status", metavar="DIR",
                     help="print the table so far of campaign DIR (running, stopped or finished), with its "
                          "progress; starts and writes nothing")
    add_scale_arguments(parser)  # core's run options, passed to every run, come from zlf.options.add_run_options
    parser.add_argument("--unit", choices=UNITS, default=None,
                        help="work unit with --gpus / --executor: a round pair (default) or a whole op")


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


def check_ray_address(scale) -> None:
    """A resumed campaign's Ray address whose password campaign.json does not keep: name it again."""
    address = (scale or {}).get("ray_address")
    if isinstance(address, str) and REDACTED in address:
        raise UsageError(f"--resume: campaign.json keeps the Ray address without its password ({address}): "
                         "give --ray-address again")



def _plan(args, session) -> CampaignPlan:
    """The ops from the OP arguments, then what the extensions set (``campaign_setup``); with
    ``--library``, the ops of the library, sampled or picked by the OP arguments."""
    if args.sample_seed is not None and args.sample is None:
        raise UsageError(f"--sample-seed {args.sample_seed} needs --sample N (it seeds nothing else)")
    if args.library is None:
        if args.sample is not None:
            raise UsageError("--sample needs --library SOURCE (the ops to sample from)")
        if args.method is not None:
            raise UsageError("--method needs --library SOURCE (a campaign of a few ops is held to Holm's rule)")
        plan = CampaignPlan(ops=[OpSpec.parse(t) for t in (args.ops or ["add", "softmax", "matmul"])])
        options = CampaignOptions.from_args(args, session.hooks, session.config)
        session.hooks.campaign_setup(plan=plan, options=options, session=session)
    else:
        plan = CampaignPlan()
        options = CampaignOptions.from_args(args, session.hooks, session.config)
        session.hooks.campaign_setup(plan=plan, options=options, session=session)
        if plan.library is None:  # no extension knows the name: a file of ops
            if not os.path.isfile(args.library):
                raise UsageError(f"--library {args.library!r}: neither an op source an active extension "
                                 "knows (zlf plugins lists them) nor a file of ops")
            plan.library, plan.library_source = library.read_op_list(args.library), os.path.abspath(args.library)
        source = plan.library_source or args.library
        chosen = library.select(plan.library, args.ops, args.sample, args.sample_seed or 0, source)
        plan.ops = [OpSpec.parse(spec) for spec in chosen]
        plan.data[library.FIELD] = {"source": source, "size": len(plan.library), "sample": args.sample,
                                    "seed": (args.sample_seed or 0) if args.sample is not None else None,
                                    "named": list(args.ops or ())}
        if plan.label is None:
            plan.label = ("aa" if args.aa else (args.switch or "ab")) + "_library"
    _check_ops(plan.ops)
    return plan


def _canaries(args, plan) -> tuple:
    """``(canary ops to add, note)``: canaries measure a process only when they run in it, i.e.
    with one process per round and side for all ops, and count only when both sides run the
    same interpreter (the same torch)."""
    mode = args.controls or ctl.AUTO
    if mode not in (ctl.AUTO, ctl.CANARY):
        return [], ""
    why = ""
    if args.process_per_op or plan.per_op or args.unit == "op":
        why = "canaries need one process per round and side for all ops (drop --process-per-op / --unit op)"
    elif (args.a_python or args.b_python) and os.path.abspath(args.a_python or sys.executable) != os.path.abspath(
            args.b_python or sys.executable):
        why = "the sides run different interpreters: a canary (torch) is not provably the same on both"
    if why and mode == ctl.CANARY:
        raise UsageError(f"--controls canary: {why}")
    if why:
        return [], why
    names = {o.name for o in plan.ops}
    return [o for o in ctl.CANARY_OPS if o not in names], ""


#: an op's folder name as given: FlagGems' in-place ops end in ``_`` (``add_``, ``erfinv_``)
OP_DIR_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*")
#: what the campaign folder itself holds beside its ops' folders
CAMPAIGN_FILES = {n.lower() for n in (CAMPAIGN, SUMMARY_LOG, SUMMARY_JSON, REPORT, PLOT, LOGS, STAGING,
                                      KEY_FILE, library.TEXT, library.JSON)}


def _check_ops(ops) -> None:
    if any(o.run_spec in ("builtin", "all") for o in ops):
        raise UsageError("name the ops (add softmax matmul) instead of 'builtin': each op gets its own runs")
    names = [o.name for o in ops]
    if SHARED in names:
        raise UsageError(f"op name {SHARED!r} is where shared processes write: rename the op (NAME:FILE)")
    if CONFIGS in names:
        raise UsageError(f"op name {CONFIGS!r} is where the sides' run configurations are: rename the op (NAME:FILE)")
    for name in names:  # each op's runs live in <campaign>/<op name>/
        if not OP_DIR_NAME.fullmatch(name):
            raise UsageError(f"op name {name!r} cannot name a directory of the campaign "
                             "(letters, digits and _ . + - only, not starting with a dot)")
        if name.lower() in CAMPAIGN_FILES:
            raise UsageError(f"op name {name!r} is a file of the campaign itself: rename the op (NAME:FILE)")
    if len(set(names)) != len(names):
        raise UsageError(f"op named twice: {sorted({n for n in names if names.count(n) > 1})[0]!r}")
    for o in ops:
        if o.source and not os.path.exists(o.source):
            raise UsageError(f"op file {o.source!r} not found")


def _statistics(args) -> Statistics:
    """campaign.json's ``statistics``: the rule's knobs and the rounds, checked. A library campaign
    screens every point, then confirms the open ones: adaptive."""
    if args.library is not None:
        args.until_confident = True
    first = args.rounds if args.rounds is not None else (DEFAULT_FIRST_LOOK if args.until_confident else DEFAULT_ROUNDS)
    if args.until_confident and args.max_rounds < first:
        raise UsageError(f"--max-rounds {args.max_rounds} is below the first look ({first} rounds)")
    if args.margin is not None:  # the deprecated spelling (one threshold serves SAME and both directions)
        args.min_effect = args.margin
    if first < stats.MIN_ROUNDS:
        warn(f"!!! {first} round(s): fewer than {stats.MIN_ROUNDS} rounds give no verdict (every point UNSURE or "
             f"without an interval); use --rounds {stats.MIN_ROUNDS} or more")
    return Statistics(
        controls=args.controls or ctl.AUTO, alpha=args.alpha, min_effect_pct=args.min_effect, pairing=args.pairing,
        trim=None, spending="obrien-fleming",
        noise_from=os.path.abspath(args.noise_from) if args.noise_from else None, noise=load_noise(args.noise_from),
        until_confident=bool(args.until_confident), first_look=first,
        max_rounds=args.max_rounds if args.until_confident else first)


def _screening_plan(args, statistics):
    """A library campaign's two-stage rule (:class:`zlf.ab.screening.Plan`): ``--rounds`` screen
    rounds, up to ``--max-rounds``, the error control of ``--method``; refused in one line when
    it cannot decide."""
    from . import screening

    plan = screening.Plan(screen_rounds=statistics.first_look, max_rounds=statistics.max_rounds, method=args.method or stats.BH)
    try:
        plan.check()
    except ValueError as exc:
        raise UsageError(f"--library: {exc}") from None
    return plan


def _campaign_data(args, session, plan, a, b, statistics) -> dict:
    """campaign.json's fields of a new campaign (before its runs)."""
    ops = plan.ops
    return {
        "label": args.label or (plan.label if library.FIELD in plan.data else None)
        or ("aa" if args.aa else (args.switch or plan.label or "ab")),
        "command": ["zlf", *sys.argv[1:]],
        "cwd": os.getcwd(),
        "driver_pid": os.getpid(),
        "aa": bool(args.aa),
        "switch": args.switch,
        "sides": [a.to_json(), b.to_json()],
        "ops": [o.to_json() for o in ops],
        "run_args": list(plan.run_args),  # the ops' command's own; run settings are in each side's configuration
        "extension_args": [],
        "scale": scale_options(args, None),
        "backend": args.backend,
        "device": args.device,
        "require_idle": bool(args.require_idle),
        "idle_wait": args.idle_wait,
        "fail_on_slower": args.fail_if_slower is not None,
        "fail_if_slower_pct": args.fail_if_slower,
        "metric": args.metric or metrics.DEFAULT,
        # startup (imports, plugins, device queries) once per round and side for all ops
        "process": PER_OP if (args.process_per_op or plan.per_op or args.unit == "op") else SHARED_PROCESS,
        "statistics": statistics.to_json(),
        **plan.data,
    }


def _new_campaign(args, session):
    statistics = _statistics(args)
    plan = _plan(args, session)
    config = session.config
    if args.library is not None and getattr(args, "time_limit", None) is None:
        args.time_limit = LIBRARY_TIME_LIMIT  # a hang costs a limit, not the campaign
        if config is not None:
            config = config.with_changes(time_limit_s=LIBRARY_TIME_LIMIT)
    canaries, why = _canaries(args, plan)
    plan.ops += [OpSpec.parse(name) for name in canaries]
    statistics = attrs.evolve(statistics, canary_ops=canaries, controls_note=why)
    a, b = build_sides(args, plan.side_args)
    configs = side_configs(args, session.hooks, plan, (a, b), config)
    data = _campaign_data(args, session, plan, a, b, statistics)
    data["context"] = session.hooks.campaign_context(data=data)
    _preflight(Driving.from_json(data), session)  # refuse before anything is written: a refused campaign cannot be resumed
    if data.get(library.FIELD) is not None:  # one chunk of the ops per GPU: every GPU works on every round
        data[library.FIELD]["chunks"] = len((data.get("scale") or {}).get("gpus") or ()) or 1
        data[library.SCREENING] = {"plan": _screening_plan(args, statistics).to_json(), "state": None}
    guard = switch_guard((a, b), plan.ops, args.switch_source, plan.not_switches)
    data["guards"] = {"switch_source": guard}
    if args.dry_run:
        _print_dry_run(data, a, b, plan.ops, guard, configs)
        return None
    for line in switch_guard_messages(guard):
        warn(line)
    label = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in data["label"])
    campaign = Campaign.create(args.out, label, data, session.hooks, configs)
    if not campaign.data.get("triton_cache"):  # an extension's plan.data may set it
        campaign.data["triton_cache"] = os.path.abspath(args.triton_cache) if args.triton_cache else str(campaign.path / "triton_cache")
        campaign.seal()  # the cache is where Triton loads compiled launchers from: signed too
    if not campaign.data.get("signature"):
        warn(f"cannot create the campaign signing key {key_path()}: this campaign cannot be resumed")
    for k in range(1, statistics.first_look + 1):
        campaign.add_round(k)
    return campaign


def _print_dry_run(data, a, b, ops, guard, configs) -> None:
    print(f"side A: {a.describe()}\nside B: {b.describe()}")
    s = Statistics.from_json(data["statistics"])
    rounds = f"{s.first_look} rounds" + (f", then up to {s.max_rounds} until confident" if s.until_confident else "")
    print(f"ops: {', '.join(o.name for o in ops)}; {rounds}")
    for line in data.get("context") or ():
        print(line)
    extra = " ".join([*data["run_args"], "--config", f"{CONFIGS}/<side>.json"])
    if data.get("process") == SHARED_PROCESS:
        print("one process per round and side for all ops (--process-per-op: one per op):")
        print(f"  zlf run {' '.join(o.run_spec for o in ops)} {extra}".rstrip())
    else:
        for o in ops:
            print(f"  zlf {o.command} {o.run_spec} {extra}".rstrip())
    for name, config in configs.items():
        print(f"{CONFIGS}/{name}.json: {json.dumps(config.to_json(), sort_keys=True)}")
    for r in guard:
        where = ", ".join(r["found"]) if r["found"] else "NOT FOUND"
        print(f"switch {r['name']} referenced in: {where}")
    for line in switch_guard_messages(guard):
        warn(line)


#: how many times a driver measures again the rounds whose results were deleted after filing
LOST_RERUNS = 2


def plan_line(campaign) -> str:
    """``1 op (+2 control ops) x 3 rounds x 2 sides; 6 processes``: the ops the user named, the
    canaries apart, and the processes still to run (a shared process runs a round's ops at once)."""
    canaries = set(campaign.statistics.canary_ops)
    own = sum(1 for o in campaign.ops if o.name not in canaries)
    controls = len(campaign.ops) - own
    left = campaign.processes_left()
    ops = f"{own} op{'s' if own != 1 else ''}"
    if controls:
        ops += f" (+{controls} control op{'s' if controls != 1 else ''})"
    return (f"{ops} x {campaign.planned_rounds()} rounds x 2 sides; "
            f"{left} process{'es' if left != 1 else ''} to go")


def main(args, session) -> int:
    if args.status:
        return status(args.status, getattr(args, "format", "table"))
    if args.resume:
        campaign = _resume(args, session)
    else:  # its run settings were checked by the command line (RunConfig.check)
        campaign = _new_campaign(args, session)
        if campaign is None:
            return 0
    campaign.data["context"] = session.hooks.campaign_context(data=campaign.data) or campaign.context
    printer = Printer(campaign)
    a, b = campaign.sides["A"], campaign.sides["B"]
    printer.line("\n  ".join([f"campaign {campaign.path}", f"A: {a.describe()}", f"B: {b.describe()}",
                              plan_line(campaign), *campaign.context]))
    driving = campaign.driving
    busy = busy_backend(session, driving.backend, driving.device) if driving.require_idle else None
    scaled = _scaled(driving, session)
    if scaled is not None:
        printer.line(f"  {scaled.executor.describe()}; unit of work: {'a round pair (A and B on one GPU)' if scaled.unit == 'pair' else 'an op'}")
    RunDir(campaign.path).reserve()  # given back to write campaign.json's last state on a full disk
    try:
        return _drive(campaign, printer, busy, scaled, args, session)
    finally:
        RunDir(campaign.path).release()


def _drive(campaign, printer, busy, scaled, args, session) -> int:
    try:
        campaign.start_clock()  # the campaign's own elapsed time, summed over --resume's (library.time_split)
        try:
            drive(campaign, printer, busy, campaign.driving.idle_wait, scaled)
            for _ in range(LOST_RERUNS):  # results deleted after filing (another op's process): measured again
                lost = campaign.reopen_lost()
                if not lost:
                    break
                printer.line(f"the results of {', '.join(lost)} are gone since they were filed: running those rounds again")
                drive(campaign, printer, busy, campaign.driving.idle_wait, scaled)
        finally:
            campaign.stop_clock()
    except OSError as exc:
        if not disk_full(exc):
            raise
        for run in campaign.runs:
            if run["status"] == RUNNING:
                run.update(status=PENDING, started=None)  # re-run whole on --resume
        campaign.data.update(status=C_DISK_FULL, error=f"{exc.strerror or exc} writing {exc.filename or campaign.path}")
        kept = "finished runs kept"
        try:
            campaign.save(last=True)
        except OSError as again:
            if not disk_full(again):
                raise
            kept += " (campaign.json keeps its last state: no room to say more)"
        raise UsageError(f"{campaign.data['error']}: {kept} -- free space and continue with: "
                         f"zlf ab --resume {campaign.path}") from exc
    except KeyboardInterrupt as exc:
        campaign.data.update(status=stop_word(exc))  # "interrupted" or "terminated" (SIGTERM); resumable
        campaign.save(last=True)
        last_word(f"\n{stop_word(exc)}; finished runs kept -- continue with: zlf ab --resume {campaign.path}")
        return stop_code(exc)
    except Stopped as exc:
        campaign.data.update(status=C_INTERRUPTED)
        campaign.save()
        print(f"zlf: {exc}\ncontinue with: zlf ab --resume {campaign.path}", file=sys.stderr)
        return 1
    return _finish(campaign, scaled, args, session)


def _resume(args, session) -> Campaign:
    """The campaign of ``--resume DIR``, checked and ready to run what is left."""
    campaign = Campaign.open(args.resume, session.hooks)
    scale = scale_options(args, campaign.scale)
    pid = campaign.driver_pid
    if campaign.status == C_RUNNING and pid and pid != os.getpid() and _alive(pid):
        raise UsageError(f"campaign {args.resume!r} is still being run by process {pid}")
    ignored = [flag for flag, given in (("--library", args.library is not None), ("--sample", args.sample is not None),
                                        ("--sample-seed", args.sample_seed is not None), ("--switch", bool(args.switch)),
                                        ("op names", bool(args.ops))) if given]
    if ignored:
        warn(f"--resume runs the campaign as it was planned: ignoring {', '.join(ignored)}")
    if (campaign.status != C_COMPLETE or any(r["status"] in (PENDING, RUNNING) for r in campaign.runs)
            or campaign.lost_runs()):
        campaign.check_resume({"A": args.a_python, "B": args.b_python})  # it will start runs
        if "configs" not in campaign.data:
            upgrade(campaign, session)
        keep_one_input_set(campaign)
        check_ray_address(scale)
    campaign.check_state()  # complete or not: its verdicts are taken as they stand
    lost = campaign.reopen_lost()  # filed, then its results deleted: measured again
    if lost:
        warn(f"the results of {', '.join(lost)} are gone since they were filed: running those rounds again")
    _preflight(attrs.evolve(campaign.driving, scale=scale), session)
    if args.metric:
        campaign.data["metric"] = args.metric
    if args.controls:  # re-decide with other controls (the canaries a campaign ran stay its only ones)
        campaign.set_statistics(controls=args.controls)
    shutil.rmtree(campaign.path / SHARED / ".staging", ignore_errors=True)  # a shared process cut short
    if scale != campaign.scale:
        campaign.data["scale"] = scale
        campaign.seal()  # given on this command line: trusted as a new campaign's would be
    stale = [r for r in campaign.runs if r["status"] in (PENDING, RUNNING)]
    for run in stale:
        run.update(status=PENDING, started=None)  # a run in flight when it stopped is re-run whole
    if stale or campaign.status != C_COMPLETE:
        campaign.data.update(driver_pid=os.getpid(), status=C_RUNNING)
    campaign.save()
    return campaign


def keep_one_input_set(campaign) -> None:
    """A campaign begun by a zlf without input copies (its run configurations name no
    ``input_copies``) goes on timing every point on its inputs alone, as its finished rounds were:
    rounds timed two ways would pair unlike with unlike. Called once its signature verified."""
    changed = False
    for side in campaign.sides:
        config = campaign.config(side)  # an unreadable file is refused here, in one line
        path = campaign.config_path(side)
        if "input_copies" not in (readers.read_json(path, limit=readers.LIMITS["config"], what="config file").get("timing") or {}):  # the file's own words
            config.with_changes(input_copies=1).write(path)
            changed = True
    if changed:
        campaign.seal()


def upgrade(campaign, session) -> None:
    """Give a campaign of an older zlf (its run options as flags in campaign.json's ``run_args``
    and ``extension_args``) each side's run configuration, read from those flags as ``zlf run``
    reads them; the flags are dropped. Called once its signature verified. A campaign of another
    command (``zlf task``: its own arguments among the flags) is refused: start a new one."""
    import contextlib
    import io

    from ..cli import build_parser, run_config

    d = campaign.data
    flags = [*(d.get("extension_args") or ()), *campaign.run_args]
    commands = sorted({o.command for o in campaign.ops})
    if commands != ["run"]:
        raise UsageError(f"--resume: campaign {campaign.path} of zlf {d.get('zlf_version')} gives zlf "
                         f"{' and '.join(commands)} its options as flags, which this zlf no longer does; "
                         "start a new campaign")
    parser = build_parser(session.hooks)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = parser.parse_args(["run", *flags])
        config = run_config(args, parser, session.hooks)
    except (SystemExit, UsageError):
        raise UsageError(f"--resume: campaign {campaign.path} of zlf {d.get('zlf_version')} gives its runs options "
                         f"this zlf cannot read ({' '.join(flags)}); start a new campaign") from None
    d["run_args"], d["extension_args"] = [], []
    config = config.with_changes(input_copies=1)  # as its rounds ran: no copies then
    campaign.write_configs({name: config.with_changes(**CAMPAIGN_OWN) for name in campaign.sides})
    campaign.seal()


def _finish(campaign, scaled, args, session) -> int:
    """Analyse, write the report, run ``after_campaign``; the exit code."""
    if campaign.status != C_COMPLETE or not campaign.data.get("finished"):
        campaign.data["finished"] = now()
    campaign.data["status"] = C_COMPLETE
    campaign.save()
    decided, remarks, excluded, alpha = decide_campaign(campaign)
    results = decided.results
    step = None
    if campaign.library:  # the verdicts of the two-stage rule (screened, then confirmed)
        step = library.look(campaign)
        results = step.results
    unreported = {**campaign.failed_ops(), **campaign.incomplete_ops()}
    for run in campaign.lost_runs():  # gone again after LOST_RERUNS: a failure, not a silent loss
        warn(f"{run['dir']}: its results.jsonl was deleted after it was filed (measured again {LOST_RERUNS} times)")
        unreported.setdefault(run["op"], run)
    reported = [o.name for o in campaign.ops if o.name not in unreported]
    for name in campaign.statistics.canary_ops:  # a canary that failed is a line,
        unreported.pop(name, None)  # not a failed campaign: the ops under test have their report
    text = report.write(campaign, results, remarks, excluded, alpha, campaign_guards(campaign, reported), decided)
    fmt = getattr(args, "format", "table")
    out = sys.stderr if fmt in ("csv", "json") else sys.stdout
    if campaign.library:
        unreported = _library_finish(campaign, results, fmt, unreported, step)
    else:
        print(output.campaign_summary(campaign, results, text, fmt))
    if scaled is not None and scaled.stats:
        table = "per worker (GPU):\n" + scaled.table()
        print(table, file=out)
        with open(campaign.path / SUMMARY_LOG, "a") as f:
            f.write("\n" + table + "\n")
    print(f"campaign dir: {campaign.path}", file=out)
    _after_campaign(campaign, results, args, session)
    if unreported:
        return 1
    pct = campaign.fail_if_slower
    if pct is not None and any(r.verdict == stats.SLOWER and _delta(r) > pct for r in results):
        return 1
    return 0


def _library_finish(campaign, results, fmt: str, unreported: dict, step=None) -> dict:
    """Print and keep the library's table (library.txt, library.json; the time split in
    campaign.json too); the per-point table stays in summary.log and report.md. An op that fails
    on A (or on both sides) is a row of the table, not a failed campaign; returns what fails it
    (exit 1): ops that fail on B only (a regression of their own) and ops with runs not done."""
    outcome = library.outcomes(campaign)
    split = library.time_split(campaign)
    campaign.data["time_split"] = split
    campaign.save()
    library.write(campaign, results, outcome, step)
    if fmt in ("table", "markdown"):
        print("\n".join(library.lines(campaign, results, outcome, step=step)))
        print(f"per-point table: {campaign.path / SUMMARY_LOG} and report.md")
    else:
        print(output.render(library.HEADERS, library.table_rows(campaign, results, outcome), fmt))
        for line in library.lines(campaign, results, outcome, step=step)[2:]:
            print(line, file=sys.stderr)
    return {op: v for op, v in unreported.items() if op not in outcome or not outcome[op].failed
            or outcome[op].where == "B only"}


def status(path: str, fmt: str = "table") -> int:
    """``zlf ab --status DIR``: the campaign's progress and its table so far, from campaign.json
    and the finished runs (a running campaign is read, never written)."""
    from .analysis import decide_campaign

    campaign = Campaign.open(path)
    runs = campaign.runs
    done = sum(1 for r in runs if r["status"] in (OK, FAILED, SKIPPED))
    rounds = library.analysable_rounds(campaign)
    step = library.look(campaign, rounds) if rounds and campaign.library else None
    results = step.results if step is not None else decide_campaign(campaign, rounds)[0].results if rounds else []
    looks = campaign.looks
    decided = (f"; last look after round {looks[-1].rounds}: {looks[-1].decided} of {looks[-1].points} points decided"
               if looks else "")
    running = campaign.status == C_RUNNING and _alive(campaign.driver_pid or 0)
    state = "running" if running else campaign.status
    print(f"campaign {campaign.path}: {state}; {done} of {len(runs)} runs done, "
          f"{campaign.processes_left()} process(es) to go; analysed over {rounds} round(s){decided}", file=sys.stderr)
    unverified = campaign.verdict_problem()
    if unverified:  # shown, never acted on: --resume refuses an edited decision state
        print(f"!!! NOT VERIFIED: {clean(unverified)}; the verdicts below are what campaign.json says, "
              "not necessarily what zlf ab decided", file=sys.stderr)
    partial = state != C_COMPLETE
    if fmt in ("table", "markdown"):
        print("\n".join(library.lines(campaign, results, partial=partial, step=step)))
    else:  # a machine reads no stderr: each row says whether the campaign's signatures verify
        rows = [[*row, unverified is None] for row in library.table_rows(campaign, results)]
        print(output.render([*library.HEADERS, "verified"], rows, fmt))
    return 0


def _delta(r) -> float:
    return r.delta_pct if r.delta_pct is not None else r.delta_median_pct


def _after_campaign(campaign, results, args, session) -> None:
    """Extensions' work on the finished campaign (``after_campaign``): after every timing run."""
    session.hooks.after_campaign(campaign, results, CampaignOptions.from_args(args, session.hooks, session.config),
                                 session)


def _preflight(driving: Driving, session) -> None:
    """Every check of the option combination that can refuse a campaign (UsageError), made before
    campaign.json is created or rewritten."""
    _scaled(driving, session)
    if driving.require_idle:
        busy_backend(session, driving.backend, driving.device)


def _scaled(driving: Driving, session) -> "Scaled | None":
    """The executor of a campaign with ``--gpus`` or ``--executor ray``; None for the plain path."""
    opts = driving.scale
    if not opts:
        return None
    if driving.device not in (None, 0) and opts.get("gpus"):
        raise UsageError("--gpus pins each worker to its GPU: drop --device")
    if driving.require_idle:
        raise UsageError("--require-idle is not supported with --gpus / --executor ray yet")
    pin = pin_variable(session, driving.backend)
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
