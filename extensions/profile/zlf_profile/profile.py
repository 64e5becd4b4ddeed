"""Profile a point's kernels under Nsight Compute, in a fresh process, as the run ran them.

``zlf profile RUN_DIR POINT...`` (or ``zlf profile OP POINT...``) starts, per point, one
``ncu ... python -m zlf run --config config.json`` whose configuration is the run's (its seed,
extensions and options) for that op, dtype and shape alone, with the run's recorded switches (never
a variable that loads code or names a path: :mod:`zlf.trust`), and with
its autotune decisions replayed (``replay_from``) when the run recorded or replayed them. Profiling is on only around the point's first calls (the checked call,
then the direct timer's first calls), never during input creation, other points or the timing
loop. Writes ``<out>/profile/<point>/``: ``ncu.csv`` (the raw report), ``metrics.md`` and
``metrics.json`` (duration, SM and DRAM throughput, occupancy, registers, shared memory,
local-memory traffic, L2 hit rate, instructions, launch grid and block), ``command.sh`` (the
exact profiling command), ``config.json`` (the profiled process's run configuration),
``child.log`` and ``run/`` (the profiled process's run directory).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import attrs
import yaml
from tabulate import tabulate
from zlf import UsageError, readers
from zlf.console import clean, md_table
from zlf.options import Number
from zlf.redact import redact, redact_text
from zlf.records import Point
from zlf.rundir import RunDir, ensure_dir, replace_dir, write_atomic
from zlf.trust import names_code, refused_variable, replayable_environment

from . import ncu
from .child import ENV_CALLS, ENV_POINT
from .launches import LaunchInfo, launch_info

EPILOG = """\
examples:
  zlf profile runs/matmul_20261201-120000 matmul/4096x4096x4096/float16
  zlf profile matmul matmul/4096x4096x4096/float16 --calls 5     an op, no run: it tunes for itself
  zlf profile RUN POINT --ncu /opt/nsight/ncu --ncu-rep           also keep the .ncu-rep report
exit codes: 0 every point profiled, 1 a point could not be profiled, 2 bad input or no profiler
"""

PROFILE_DIR = "profile"
METRICS_JSON = "metrics.json"
METRICS_MD = "metrics.md"
RAW_CSV = "ncu.csv"
REPORT = "report"  # ncu adds .ncu-rep
COMMAND = "command.sh"
CHILD_LOG = "child.log"
CHILD_RUN = "run"
CHILD_CONFIG = "config.json"
SHAPES = "shapes.yaml"
#: launches profiled per call when the run does not say how many the call makes (a safety cap).
MAX_PER_CALL = 64
#: extensions a profiled process always needs: one shape (``--shapes``) and the profiling switch.
NEEDED = ("shapes", "profile")
REPLAY_EXTENSION = "autotune_replay"
#: the run options a profiled process sets itself, by the extension that declares them.
SHAPES_OPTION = ("shapes", "shapes")
REPLAY_OPTION = (REPLAY_EXTENSION, "replay_from")
#: the budgets of a profiled process: the smallest zlf run accepts (the profiled calls are the first few anyway).
TIMING = {"timer": "core", "warmup_ms": 0.0, "rep_ms": 0.001, "flush_l2": None, "warmup": None, "iters": None}
#: variables of the current machine that a run's recorded environment never replaces.
KEEP_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
            "ZLF_NO_PROGRESS", ENV_POINT, ENV_CALLS)
#: the profiled process's extensions are named with --ext: a selection from the environment would
#: add to or block them.
SELECTION_ENV = ("ZLF_EXTENSIONS", "ZLF_DISABLE")
NO_PROFILER = ("no profiler: ncu not found (PATH, $ZLF_NCU, /usr/local/cuda/bin; or --ncu PATH); "
               "Proton is no substitute here: it reports kernel times only, no registers, occupancy, "
               "throughput, cache or instruction counters")


def configure_parser(p) -> None:
    p.add_argument("source", metavar="RUN_OR_OP", help="a run directory, or an op as zlf run takes it (it then tunes for itself)")
    p.add_argument("points", nargs="+", metavar="POINT", help="point id as the run table shows it, e.g. matmul/4096x4096x4096/float16")
    add_profiler_options(p)
    p.add_argument("--out", metavar="DIR", help="parent of profile/ (default: the run directory, or . for an op)")
    p.add_argument("--python", metavar="PATH", help="interpreter of the profiled process (default: this one)")
    p.add_argument("--op", metavar="SPEC", dest="op_spec",
                   help="the op as zlf run takes it (default: the run's, unless meta.json names a file: "
                        "zlf imports no code a record names, so an op file must be named here)")


#: --calls and --triage-calls: profiled calls of a point
CALLS = Number(int, 1, 1000, unit="calls")


def add_profiler_options(p) -> None:
    g = p.add_argument_group("profiler")
    g.add_argument("--calls", type=CALLS, default=3, metavar="N",
                   help="calls of the point profiled in the one process; their spread is the noise (default 3)")
    g.add_argument("--ncu", metavar="PATH", help=f"the ncu executable (default: ${ncu.ENV_NCU}, ncu on PATH, /usr/local/cuda/bin/ncu)")
    g.add_argument("--ncu-rep", action="store_true", help="also keep ncu's binary report (report.ncu-rep) for Nsight Compute's UI")


# ----------------------------------------------------------------------------- what to profile
@attrs.frozen
class Target:
    """One point to profile and where it comes from: a run directory (its record and meta), or an op."""

    point: Point
    op_spec: str
    run_dir: Optional[Path] = None
    record: object = None
    meta: dict = attrs.field(factory=dict)

    @property
    def replay_from(self) -> Optional[Path]:
        """The autotune record this run used: its own (record mode) or its source (replay)."""
        if self.run_dir is None:
            return None
        auto = self.meta.get("autotune") or {}
        if auto.get("mode") == "replay" and auto.get("source"):
            src = Path(auto["source"])
            return src if src.is_absolute() else Path(self.meta.get("cwd") or ".") / src
        if (self.run_dir / "autotune_records").is_dir():
            return self.run_dir
        return None


def parse_point(text: str) -> Point:
    """``op/1024x512/float16[/variant]`` -> Point (op names may hold a slash: the shape is the
    first part that reads as one)."""
    parts = text.split("/")
    for i in range(1, len(parts) - 1):
        if re.fullmatch(r"\d+(x\d+)*|scalar", parts[i]):
            shape = () if parts[i] == "scalar" else tuple(int(d) for d in parts[i].split("x"))
            return Point("/".join(parts[:i]), shape, parts[i + 1], "/".join(parts[i + 2:]))
    raise UsageError(f"point {text!r}: expected OP/SHAPE/DTYPE[/VARIANT], e.g. matmul/4096x4096x4096/float16")


def is_run_dir(path) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / "meta.json").is_file() or (p / "results.jsonl").is_file())


def op_spec_of(meta: dict, op: str) -> str:
    """The OP argument of the run that produced ``op``."""
    specs = [s for s in ((meta.get("options") or {}).get("ops") or []) if s not in ("builtin", "all")]
    for s in specs:
        if s == op or s.endswith(f"::{op}") or s.startswith(f"{op}:"):
            return s
    return specs[0] if len(specs) == 1 else op


def targets(source: str, points, op_spec: Optional[str] = None) -> list:
    """The points to profile. The op of a run directory is its meta.json's; one that names a file
    (code) is taken only from ``op_spec`` (``--op``): a record never names code to import."""
    if is_run_dir(source):
        rd = RunDir.open(source)
        records, _ = rd.records()
        by_id = {r.point: r for r in records}
        meta = rd.meta()
        out = []
        for text in points:
            if text not in by_id:
                known = ", ".join(list(by_id)[:4]) + (" ..." if len(by_id) > 4 else "")
                raise UsageError(f"point {text!r} is not in run {source!r} (points: {known or 'none'})")
            rec = by_id[text]
            point = Point(rec.op, rec.shape, rec.dtype, rec.variant)
            spec = op_spec or op_spec_of(meta, rec.op)
            if op_spec is None and names_code(spec):
                raise UsageError(f"the op of {text} is a file that meta.json names ({spec!r}): zlf imports no code "
                                 f"a record names; name the op file yourself: --op FILE.py[::NAME]")
            out.append(Target(point, spec, Path(source).resolve(), rec, meta))
        return out
    if os.path.isdir(source):
        raise UsageError(f"{source!r} is a directory but not a zlf run directory (no meta.json or results.jsonl)")
    return [Target(parse_point(text), op_spec or source) for text in points]


def folder_name(point_id: str) -> str:
    """A folder name for a point id that stays inside its parent: no separators, no dot names."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", point_id).strip("._") or "point"
    return name[:200]


# ----------------------------------------------------------------------------- the profiled process
def child_extensions(target: Target, session, replay: bool) -> tuple:
    installed = {i.name: i for i in session.hooks.infos}
    if target.run_dir is not None and target.meta.get("extensions") is not None:
        names = [e["name"] for e in target.meta["extensions"]]
    else:
        names = [i.name for i in session.hooks.infos if i.status == "active"]
    names += list(NEEDED) + ([REPLAY_EXTENSION] if replay else [])
    names = list(dict.fromkeys(names))
    missing = [n for n in names if n not in installed]
    if missing:
        raise UsageError(f"profiling {target.point.id} needs extension(s) {', '.join(missing)}, not installed here")
    return tuple(names)


def child_config(target: Target, session, shapes_file: Path, replay: Optional[str]):
    """The profiled process's :class:`zlf.config.RunConfig`: the run's recorded settings and
    extension options (those the active extensions declare), for the point's op, dtype and
    shape alone, with the smallest budgets, replaying the run's autotune record."""
    from zlf.config import ExtensionOptions, RunConfig

    hooks = session.hooks
    if not hooks.option_sets:  # zlf profile starts no run itself: declare the run options here
        hooks.add_options(argparse.ArgumentParser(add_help=False), "run")
    recorded = (target.meta.get("options") or {}) if target.run_dir is not None else {}
    config = RunConfig.from_args(argparse.Namespace(**recorded), hooks.option_sets)
    config = config.with_changes(command="run", ops=(target.op_spec,), dtypes=(target.point.dtype,), out="runs",
                                 name="profiled", summary_format="table", gpus=None, executor=None, ray_address=None,
                                 retries=None, ext=child_extensions(target, session, replay is not None), no_ext=None,
                                 **TIMING)
    # only the options of the extensions it selects; a replay the run did is the one given here, or none;
    # no recorded value that names a file (code, a cache, a checkout): a record never names code
    values = {owner: {k: (None if names_code(v) or (isinstance(v, (list, tuple)) and any(map(names_code, v))) else v)
                      for k, v in owned.items()}
              for owner, owned in config.options.values.items() if owner in config.ext}
    values[SHAPES_OPTION[0]] = {**values.get(SHAPES_OPTION[0], {}), SHAPES_OPTION[1]: str(shapes_file)}
    if replay is not None or REPLAY_OPTION[0] in values:
        values[REPLAY_OPTION[0]] = {**values.get(REPLAY_OPTION[0], {}), REPLAY_OPTION[1]: str(replay) if replay else None}
    return attrs.evolve(config, options=ExtensionOptions(values))


def child_environment(target: Target, extra: Optional[dict] = None, prefixes=None) -> dict:
    """This process's environment with the run's recorded switches in place of this machine's
    (a switch such as DISABLE_MMA_V3 must be what the run had), device visibility kept. Of the
    record, only what :func:`zlf.trust.replayable_environment` allows: switches the run's
    extensions declare, never a variable that loads code or names a path (``LD_PRELOAD``,
    ``PYTHONPATH``, ``TRITON_CACHE_DIR``); this machine's variables of that kind stay as they are.

    :param prefixes: the variables a run records (``session.hooks.env_prefixes()``; default: core's).
    """
    from zlf.run import ENV_PREFIXES

    prefixes = tuple(ENV_PREFIXES if prefixes is None else prefixes)
    env = dict(os.environ)
    recorded = target.meta.get("environment") if target.run_dir is not None else None
    if recorded is not None:
        replayed, _ = replayable_environment(recorded, prefixes)
        for k in [k for k in env if k.startswith(prefixes) and k not in KEEP_ENV and not refused_variable(k, "")]:
            del env[k]
        env.update({k: v for k, v in replayed.items() if k not in KEEP_ENV})
    env.update(extra or {})
    for k in ("FORCE_COLOR",) + SELECTION_ENV:
        env.pop(k, None)
    env.update({"ZLF_NO_PROGRESS": "1", "NO_COLOR": "1"})
    return env


@attrs.frozen
class Plan:
    """The zlf run command of the profiled process, its configuration, environment, where it
    runs, and why."""

    argv: list
    env: dict
    cwd: str
    shapes_yaml: dict
    replay_from: Optional[str]
    notes: tuple = ()
    config: object = None


def plan(target: Target, session, folder: Path, work: Path, calls: int, python: Optional[str] = None,
         extra_env: Optional[dict] = None, cwd: Optional[str] = None) -> Plan:
    """The profiled process; its configuration goes to ``folder/config.json`` (written by
    :func:`profile_point`), its run directory under ``work``."""
    notes = []
    replay = target.replay_from
    if replay is not None and not (Path(replay) / "autotune_records").is_dir():
        notes.append(f"the run's autotune record {replay} is gone: the profiled process tuned for itself")
        replay = None
    if target.run_dir is None:
        notes.append("no run given: the profiled process tuned for itself (its autotune choice may differ from any run's)")
    elif replay is None:
        notes.append("the run has no autotune record (autotune_replay was not active): the profiled process tuned for itself")
    point = target.point
    config = child_config(target, session, folder / SHAPES, replay)
    argv = [python or sys.executable, "-m", "zlf", "run", "--config", str(folder / CHILD_CONFIG), "--out", str(work)]
    prefixes = session.hooks.env_prefixes()
    env = child_environment(target, extra_env, prefixes)
    env.update({ENV_POINT: point.id, ENV_CALLS: str(calls)})
    if target.run_dir is not None:
        _, refused = replayable_environment(target.meta.get("environment"), prefixes)
        if refused:
            notes.append("not replayed from meta.json: " + ", ".join(refused))
        dropped = _dropped_options(target)
        if dropped:
            notes.append("recorded options naming a file, not replayed: " + ", ".join(dropped))
    # ``cwd`` (a verified campaign's) or this process's working directory, never a run's record:
    # ``python -m`` imports from it
    cwd = cwd if cwd and os.path.isdir(cwd) else os.getcwd()
    shapes = {point.op: {"shapes": [list(point.shape)]}}
    return Plan(argv, env, cwd, shapes, str(replay) if replay else None, tuple(notes), config)


def _dropped_options(target: Target) -> list:
    out = []
    for owner, owned in ((target.meta.get("options") or {}).items() if isinstance(target.meta.get("options"), dict) else ()):
        for k, v in (owned.items() if isinstance(owned, dict) else [(owner, owned)]):
            if owner in ("ops", "op_spec") or k in (SHAPES_OPTION[1], REPLAY_OPTION[1], "ops", "out", "config"):
                continue
            if names_code(v) or (isinstance(v, (list, tuple)) and any(map(names_code, v))):
                out.append(k)
    return sorted(set(out))


def replay_lines(target: Target, p: "Plan") -> list:
    """What of the run the profiled process replays, as ``zlf profile`` shows it."""
    if target.run_dir is None:
        return [f"{target.point.id}: no run: the op {target.op_spec!r} with zlf's defaults"]
    seed = ((p.config.options.values.get("seed") or {}).get("seed") if p.config is not None else None)
    recorded = target.meta.get("environment") if isinstance(target.meta.get("environment"), dict) else {}
    switches = {k: v for k, v in p.env.items() if k in recorded and recorded.get(k) == v and k not in KEEP_ENV}
    lines = [f"{target.point.id}: replays op {target.op_spec!r}, shape {list(target.point.shape)}, "
             f"dtype {target.point.dtype}, seed {seed if seed is not None else '-'}, "
             f"autotune choice {p.replay_from or '-'}",
             "  variables: " + (" ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(switches.items())) or "none")]
    return lines + [f"  note: {n}" for n in p.notes if n.startswith(("not replayed", "recorded options"))]


def env_prefix(env: dict, base=None) -> str:
    """``K=V ...`` for the variables that differ from ``base`` (default: this process's)."""
    base = os.environ if base is None else base
    changed = {k: v for k, v in sorted(env.items()) if base.get(k) != v}
    removed = sorted(k for k in base if k not in env)
    parts = [f"-u {shlex.quote(k)}" for k in removed] + [f"{k}={shlex.quote(v)}" for k, v in changed.items()]
    return ("env " + " ".join(parts) + " ") if parts else ""


# ----------------------------------------------------------------------------- one point
@attrs.frozen
class Profile:
    """What ``zlf profile`` found for one point (also ``metrics.json``)."""

    point: str
    dir: str
    ok: bool
    why: str = ""
    profiler: str = ""
    calls: int = 0
    kernels: tuple = ()
    launches: str = ""
    notes: tuple = ()
    replay_from: Optional[str] = None
    seconds: float = 0.0
    run_median_ms: Optional[float] = None

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["kernels"] = [k.to_json() for k in self.kernels]
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Profile":
        names = {a.name for a in attrs.fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        d["kernels"] = tuple(ncu.KernelStats.from_json(k) for k in d.get("kernels") or ())
        d["notes"] = tuple(d.get("notes") or ())
        return cls(**d)

    @classmethod
    def load(cls, folder) -> Optional["Profile"]:
        try:
            return cls.from_json(readers.read_json(Path(folder) / METRICS_JSON, what=METRICS_JSON))
        except (OSError, ValueError, TypeError, KeyError, UsageError):  # not one of ours: no profile
            return None




def _child_record(work: Path, point_id: str):
    for d in sorted(p for p in work.iterdir() if p.is_dir()) if work.is_dir() else ():
        if (d / "results.jsonl").is_file():
            records, _ = RunDir(d).records()
            for r in records:
                if r.point == point_id:
                    return d, r
            return d, None
    return None, None


def profile_point(target: Target, parent: Path, session, calls: int = 3, ncu_path: Optional[str] = None,
                  python: Optional[str] = None, extra_env: Optional[dict] = None, keep_rep: bool = False,
                  folder: Optional[str] = None, shown_as: Optional[Path] = None, show: bool = False,
                  cwd: Optional[str] = None) -> Profile:
    """Profile one point into ``parent/<folder>/`` (written whole, then swapped in).

    :param shown_as: where the folder will finally be, when ``parent`` is itself a temporary
        folder (a triage bundle being written): the paths in ``command.sh`` and ``metrics.json``.
    :param cwd: the profiled process's working directory, from a verified campaign (triage);
        default this process's (never a run's meta.json).
    """
    t0 = time.monotonic()
    name = folder or folder_name(target.point.id)
    parent = Path(parent).absolute()
    # the folder may be in a received run directory: a ``profile`` link there is refused, and the
    # bundle is written into a fresh folder of its own, then swapped in (a link in its place is
    # replaced, never followed)
    ensure_dir(parent, parent.parent)
    final = parent / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent))
    work = tmp / ".work"
    work.mkdir()
    info = launch_info(target.record, target.run_dir, target.point) if target.run_dir is not None else LaunchInfo()
    p = plan(target, session, tmp, work, calls, python, extra_env, cwd)
    if show:  # what of the record the profiled process gets, before it runs
        print("\n".join(clean(line) for line in replay_lines(target, p)), file=sys.stderr, flush=True)
    write_atomic(tmp / SHAPES, yaml.safe_dump(p.shapes_yaml, default_flow_style=None))
    p.config.write(tmp / CHILD_CONFIG)
    # a host wall-clock time (cpu backend) is no kernel time: no ratio against ncu's
    median = getattr(target.record, "median_ms", None) if getattr(target.record, "timer", None) != "host_wall" else None
    shown = Path(shown_as) if shown_as is not None else final
    notes = list(p.notes)

    def finish(ok: bool, why: str = "", kernels=(), profiler: str = "") -> Profile:
        result = Profile(point=target.point.id, dir=str(shown), ok=ok, why=why, profiler=profiler, calls=calls,
                         kernels=tuple(kernels), launches=info.describe(), notes=tuple(notes),
                         replay_from=p.replay_from, seconds=round(time.monotonic() - t0, 2), run_median_ms=median)
        write_atomic(tmp / METRICS_JSON, json.dumps(redact(result.to_json()), indent=2) + "\n")
        write_atomic(tmp / METRICS_MD, redact_text(render_markdown(result)))
        shutil.rmtree(work, ignore_errors=True)
        # command.sh runs it again from where the folder is kept
        write_atomic(tmp / CHILD_CONFIG, (tmp / CHILD_CONFIG).read_text().replace(_json_text(tmp), _json_text(shown)))
        replace_dir(tmp, final)
        return result

    tool = ncu.find_ncu(ncu_path)
    if tool is None:
        return finish(False, NO_PROFILER)
    log_file = tmp / RAW_CSV
    kernels = list(info.kernels) if info.known else []
    cap = calls * (len(info.kernels) if info.ordered else MAX_PER_CALL)
    cmd = ncu.command(tool, str(log_file), p.argv, kernels=kernels, launch_count=cap,
                      export=str(tmp / REPORT) if keep_rep else None)
    script = f"#!/bin/sh\n# profile {target.point.id} again (zlf profile wrote this)\ncd {shlex.quote(p.cwd)} && " \
             f"{env_prefix(p.env)}{shlex.join(cmd)}\n"
    write_atomic(tmp / COMMAND, script.replace(str(tmp), str(shown)))
    with open(tmp / CHILD_LOG, "w") as out:
        rc = subprocess.run(cmd, cwd=p.cwd, env=p.env, stdout=out, stderr=subprocess.STDOUT).returncode
    text = log_file.read_text(errors="replace") if log_file.is_file() else ""
    rep = tmp / f"{REPORT}.ncu-rep"
    if keep_rep and not ncu.csv_lines(text) and rep.is_file():
        # With --export ncu may keep the results for the report alone: read them back from it.
        imported = subprocess.run([tool, "--import", str(rep), "--csv"], capture_output=True, text=True)
        text += imported.stdout
        write_atomic(log_file, text)
    child_dir, child_rec = _child_record(work, target.point.id)
    if child_dir is not None:
        os.replace(child_dir, tmp / CHILD_RUN)
    notes += [n for n in ncu.notes(text) if "unmodified GPU clocks" not in n]
    per_call = None
    if child_rec is not None:
        own = (child_rec.extra or {}).get("launches") or {}
        if own.get("kernels"):
            per_call = len([k for k in own["kernels"] if not kernels or k in kernels])
        if own.get("sweep"):
            notes.append(f"the profiled process ran an autotune sweep of {own['sweep']} launches (not profiled)")
        profiled = (child_rec.extra or {}).get("profiled") or {}
        for err in profiled.get("errors") or ():
            notes.append(f"switching the profiler failed: {err}")
        if child_rec.status != "ok":
            notes.append(f"the profiled point {child_rec.status}: {child_rec.error or ''}".rstrip(": "))
    launches = ncu.parse_csv(text)
    if not launches:
        errors = [n for n in ncu.notes(text) if n.startswith("==ERROR==")]
        tail = errors[0] if errors else _tail(tmp / CHILD_LOG)
        why = f"ncu profiled no kernel (exit code {rc})" + (f": {tail}" if tail else "")
        no_gpu = why_no_gpu([target])
        if no_gpu:  # the cause, before what ncu made of it
            why = f"{no_gpu}; {why}"
        return finish(False, why, profiler="ncu")
    groups = ncu.split_calls(launches, calls, per_call)
    if len(groups) != calls:
        notes.append(f"{len(launches)} launches did not split into {calls} calls: read as {len(groups)} call(s)")
    if rc != 0:
        notes.append(f"the profiled process exited with code {rc}")
    return finish(True, kernels=ncu.summarise(groups), profiler="ncu")


def _json_text(path: Path) -> str:
    """``path`` as it reads inside a JSON string."""
    return json.dumps(str(path))[1:-1]


def _tail(path: Path) -> str:
    try:
        lines = [l.strip() for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


# ----------------------------------------------------------------------------- showing it
def metrics_rows(kernels) -> list:
    rows = []
    for key in ncu.METRIC_KEYS:
        row = [f"{ncu.LABELS[key]}" + (f" ({ncu.UNITS[key]})" if ncu.UNITS[key] else "")]
        for k in kernels:
            value = ncu.fmt(key, k.mean.get(key))
            noise = k.noise.get(key)
            row.append(value + (f" ± {ncu.fmt(key, noise / 2)}" if noise else ""))
        rows.append(row)
    return rows


def render_markdown(result: Profile) -> str:
    out = [f"# Profile of {result.point}", ""]
    if not result.ok:
        out += [result.why, ""]
    else:
        out += [f"ncu, {result.calls} profiled call(s) of the point in one process, clocks as they were "
                f"(`--clock-control none`), caches flushed before each kernel (ncu's default); "
                "± is half the spread over the calls.", ""]
        headers = ["metric"] + [f"#{k.index} {k.kernel}" for k in result.kernels]
        out.append(md_table(metrics_rows(result.kernels), headers))
        out.append("")
        total = ncu.call_total(result.kernels)
        if total is not None and result.run_median_ms:
            out.append(f"ncu duration per call {total:.4g} µs; the run's median {result.run_median_ms * 1e3:.4g} µs "
                       f"(ratio {total / (result.run_median_ms * 1e3):.3f})")
            out.append("")
    out.append(f"- launches: {result.launches}")
    if result.replay_from:
        out.append(f"- autotune decisions replayed from {result.replay_from}")
    out += [f"- {n}" for n in result.notes]
    out.append("")
    return "\n".join(out)


def print_result(result: Profile) -> None:
    print(f"{result.point}: " + ("profiled" if result.ok else result.why))
    if result.ok:
        headers = ["metric"] + [f"#{k.index} {k.kernel}" for k in result.kernels]
        print(tabulate(metrics_rows(result.kernels), headers=headers))
    for n in result.notes:
        print(f"  note: {n}")
    print(f"profile dir: {result.dir}")


def gpu_visible() -> bool:
    """Whether this process sees a CUDA GPU (torch's answer; no device is set up)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken torch sees no GPU either
        return False


def why_no_gpu(found) -> str:
    """Why the points cannot be profiled here: a run made on the cpu backend has no GPU kernels,
    a machine without a GPU runs none; '' when neither."""
    for target in found:
        backend = (target.meta or {}).get("backend") if target.run_dir is not None else None
        if backend == "cpu":
            return (f"run {str(target.run_dir)!r} ran on the cpu backend (Triton interpreter): it has no GPU kernels "
                    "for Nsight Compute to profile; profile a run made on a GPU, or an OP on a GPU machine")
    if not gpu_visible():
        return ("no GPU here (torch sees no CUDA device): zlf profile runs the point's kernels under Nsight "
                "Compute, which needs an NVIDIA GPU; run it on the GPU machine")
    return ""


def main(args, session) -> int:
    if args.calls < 1:
        raise UsageError("--calls must be at least 1")
    found = targets(args.source, args.points, args.op_spec)
    if ncu.find_ncu(args.ncu) is None:
        no_gpu = why_no_gpu(found)  # the first cause a reader must hear; the missing ncu comes second
        raise UsageError(f"{no_gpu}; and {NO_PROFILER}" if no_gpu else NO_PROFILER)
    if args.python and not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
        raise UsageError(f"--python {args.python!r} is not an executable file")
    parent = Path(args.out) if args.out else (found[0].run_dir if found[0].run_dir is not None else Path("."))
    failed = 0
    for target in found:
        result = profile_point(target, parent / PROFILE_DIR, session, calls=args.calls, ncu_path=args.ncu,
                               python=args.python, keep_rep=args.ncu_rep, show=True)
        print_result(result)
        failed += 0 if result.ok else 1
    return 1 if failed else 0
