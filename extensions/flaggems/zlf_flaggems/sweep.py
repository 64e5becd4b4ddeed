"""Run every benchmark op of a FlagGems checkout, each in its own zlf run process, into one table.

    zlf sweep --flaggems-dir ~/FlagGems                          every op of benchmark/test_*.py
    zlf sweep --flaggems-dir ~/FlagGems --sample 100 --sample-seed 22 --gpus 0,1,2,3
    zlf sweep --resume runs/flaggems_20261202-0412             finish what a stopped sweep left

Each op runs as ``zlf run --ext flaggems --ext cudagraph --ext cupti --ext seed OP:FILE`` in a
process group of its own: a crash, a refusal or a hang of one op never stops the sweep. An op
past ``--op-time-limit`` has its Python stacks dumped to its log (SIGUSR1), then its process
group is killed; the table names what it was doing (its last phase line, see
:mod:`zlf_flaggems.phases`). ``sweep.jsonl`` gets one line per finished op as it finishes
(``--resume`` skips those), ``sweep.tsv`` the table at the end.
"""
from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from zlf import UsageError, readers
from zlf.options import SECONDS, SEED, Number
from zlf.procs import python_child_env
from zlf.rundir import ensure_dir, open_nofollow, write_atomic
from zlf.trust import seal, sealed_by_me

from . import checkout as _checkout
from . import phases as _phases

EPILOG = """\
examples:
  zlf sweep --flaggems-dir ~/FlagGems                        every op, one GPU
  zlf sweep --flaggems-dir ~/FlagGems softmax mm             these ops
  zlf sweep --flaggems-dir ~/FlagGems --sample 100 --sample-seed 22 --gpus 0,1,2,3
  zlf sweep --resume runs/flaggems_20261202-041233         skip the ops already finished
status: ok (every point ok), failed (a point FAILED), refused (FlagGems skips it here, or zlf
        refused it: exit 2), hung (killed past --op-time-limit, or a point hung past --time-limit),
        compile_limit (a point ran past --time-limit in its first FlagGems call: Triton compiling,
        FlagGems tuning; give it --flaggems-compile-time-limit; or the op ran past --op-time-limit while
        Triton still compiled kernels, the last within 60 s: give it --op-time-limit), crashed
        (a point killed its process: zlf run filed it and went on; or any other exit)
exit codes: 0 the sweep ran (whatever its ops did), 2 bad input, 130 interrupted (SIGINT), 143
            terminated (SIGTERM): running ops are killed and run again by --resume; the table of
            the finished ones is printed
"""

STATE = "sweep.json"
LINES = "sweep.jsonl"
#: what --resume needs of a sweep.jsonl row (zlf.readers: a line that is not one is skipped, its op runs again)
ROW_SCHEMA = {"type": "object", "required": ["spec"], "properties": {"spec": {"type": "string"}}}
TABLE = "sweep.tsv"
DEFAULT_RUN_EXTS = ("cudagraph", "cupti", "seed")
DEFAULT_OP_LIMIT = 600.0
#: the status of an op whose points ran past --time-limit while compiling, not while measured
COMPILE_LIMIT = "compile_limit"
#: an op killed at --op-time-limit is compile_limit, not hung, when Triton compiled a kernel this
#: recently: one compile takes seconds, up to tens of seconds with several ops compiling at once
PROGRESS_WINDOW_S = 60.0
#: timers that read the device (the issue's target share); the others include host time
DEVICE_TIMERS = ("cudagraph", "cupti")
BUILTIN_MARKS = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings",
                 "timeout", "tryfirst", "trylast"}
FIELDS = ("op", "status", "points", "ok", "failed", "unchecked", "timers", "fallback", "reference_mismatch", "skip_reason",
          "first_error", "wall_s", "startup_s", "import_s", "plan_s", "inputs_s", "compile_s", "measure_s",
          "last_phase", "rc")
TABLE_FIELDS = ("op", "status", "ok", "failed", "unchecked", "timers", "wall_s", "import_s", "compile_s",
                "measure_s", "skip_reason", "first_error")


def configure_parser(p) -> None:
    from zlf.executors import add_gpus_argument
    from zlf.options import add_check_argument, add_time_limit_argument, deprecated
    from zlf.output import add_format_argument

    from .plugin import (COMPILE_SECONDS, MAX_SHAPES, add_compile_time_limit_argument, add_dir_argument,
                         add_max_shapes_argument)

    # the run options it passes on to each op's zlf run come from their declarers, with the sweep's help
    add_dir_argument(p, f"FlagGems source checkout (also {_checkout.ENV_DIR})")
    p.add_argument("ops", nargs="*", metavar="OP", help="these ops (marks, or MARK:FILE) instead of every op")
    deprecated(p, "--ops", "OP arguments", dest="ops_option", metavar="A,B")
    p.add_argument("--sample", type=Number(int, 1, 10**6, unit="ops"), metavar="N",
                   help="a random sample of N ops instead of every op (with --sample-seed)")
    p.add_argument("--sample-seed", type=SEED, default=0, metavar="S", help="seed of --sample (default 0)")
    add_gpus_argument(p, "one op at a time per listed GPU (CUDA_VISIBLE_DEVICES of each op's process; repeat an "
                         "index for two ops on one GPU), e.g. 0,1,2,3")
    p.add_argument("--op-time-limit", type=Number(float, 0, SECONDS, low_open=True, unit="seconds"), metavar="SEC",
                   help="wall seconds per op process, past which its process group is killed and the op "
                        "recorded as hung with its last phase (default 600; with --resume: the sweep's own "
                        "unless given)")
    add_time_limit_argument(p, "zlf run --time-limit of every point (default 60)", default=60.0)
    add_compile_time_limit_argument(p, "zlf run --flaggems-compile-time-limit: seconds a point's first FlagGems "
                                       "call (compiling, tuning) gets beyond --time-limit (default 0)",
                                    dest="compile_time_limit")
    deprecated(p, "--compile-time-limit", "--flaggems-compile-time-limit", type=COMPILE_SECONDS,
               dest="compile_time_limit")
    add_max_shapes_argument(p, "zlf run --flaggems-max-shapes: each op's N smallest built-in shapes",
                            dest="max_shapes")
    deprecated(p, "--max-shapes", "--flaggems-max-shapes", type=MAX_SHAPES, dest="max_shapes")
    add_check_argument(p, "zlf run --check: warn times points whose reference check fails, marked UNCHECKED "
                          "(default fail)")
    p.add_argument("--run-ext", action="append", metavar="NAME",
                   help=f"extensions of each op's zlf run besides flaggems (repeatable; none: flaggems alone; default: "
                        f"{' '.join(DEFAULT_RUN_EXTS)})")
    p.add_argument("--run-args", metavar="ARGS", default="",
                   help="more zlf run options for every op, one shell-quoted string (e.g. '--dtype float16')")
    p.add_argument("--out", default="runs", metavar="PARENT", help="parent of the sweep directory (default: runs/)")
    p.add_argument("--name", metavar="LABEL", help="label of the sweep directory (default: flaggems)")
    p.add_argument("--resume", metavar="DIR", help="a sweep directory: run the ops it has not finished, "
                   "with its settings (--flaggems-dir and --op-time-limit, when given, replace the sweep's)")
    add_format_argument(p, json_alias=False)


# ----------------------------------------------------------------------------- ops of a checkout
_MARK = re.compile(r"(?<!\w)mark\.([A-Za-z_][A-Za-z0-9_]*)")


def list_ops(checkout) -> list:
    """Every benchmark op of ``checkout`` as ``MARK:FILE`` specs, in file order: the pytest marks
    of each ``benchmark/test_*.py`` (FlagTune's ``test_*_parallel.py`` drivers aside); a mark
    found in several files runs from the first. Marks made at run time (``getattr(pytest.mark,
    name)`` in v5.0.2's grouped files) are not in the text: name those ops as OP arguments."""
    out, seen = [], set()
    for path, text in _checkout.benchmark_texts(checkout.bench_dir):
        for mark in _MARK.findall(text):
            if mark in BUILTIN_MARKS or mark in seen:
                continue
            seen.add(mark)
            out.append(f"{mark}:{path.stem[len('test_'):]}")
    return out


def choose_ops(all_ops: list, ops, sample, seed) -> list:
    if ops:
        by_mark = {s.split(":")[0]: s for s in all_ops}
        chosen = []
        for name in (o.strip() for o in ops.split(",") if o.strip()):
            if ":" in name:
                chosen.append(name)
            elif name in by_mark:
                chosen.append(by_mark[name])
            else:
                raise UsageError(f"op {name!r}: no benchmark file of the checkout marks it")
        if not chosen:
            raise UsageError("no op given")
        return list(dict.fromkeys(chosen))
    if sample is not None:
        return random.Random(seed).sample(all_ops, min(sample, len(all_ops)))
    return list(all_ops)


# ----------------------------------------------------------------------------- one op
def op_name(spec: str) -> str:
    return spec.split(":")[0]


def _safe(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)


def child_command(settings: dict, spec: str, out: Path) -> list:
    cmd = [sys.executable, "-m", "zlf", "run", "--ext", "flaggems"]
    for ext in settings["run_exts"]:
        if ext != "none":
            cmd += ["--ext", ext]
    cmd += ["--flaggems-dir", settings["flaggems_dir"], "--out", str(out), "--name", op_name(spec),
            "--time-limit", f"{settings['time_limit']:g}"]
    if settings.get("check", "fail") != "fail":
        cmd += ["--check", settings["check"]]
    if settings.get("max_shapes"):
        cmd += ["--flaggems-max-shapes", str(settings["max_shapes"])]
    if settings.get("compile_time_limit"):
        cmd += ["--flaggems-compile-time-limit", f"{settings['compile_time_limit']:g}"]
    return cmd + shlex.split(settings.get("run_args") or "") + [spec]


def _kill(proc, log) -> None:
    """SIGUSR1 (the child dumps its stacks: :mod:`zlf_flaggems.phases`), then SIGKILL to the group."""
    for sig, wait in ((getattr(signal, "SIGUSR1", None), 3.0), (signal.SIGKILL, 10.0)):
        if sig is None:
            continue
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            if sig == signal.SIGKILL:
                return
        except subprocess.TimeoutExpired:
            continue
    log.write(f"\nzlf sweep: process group {proc.pid} did not end after SIGKILL\n")


def run_op(settings: dict, root: Path, spec: str, gpu, running: Optional[dict] = None) -> dict:
    """One op in its own process group; the row the table shows for it. ``running`` (spec ->
    process) holds the process while it runs, for a sweep that is stopped to end it."""
    safe = _safe(spec)
    out = root / "runs" / safe
    shutil.rmtree(out, ignore_errors=True)  # an attempt a stopped sweep left: this one replaces it
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    phase_file = logs / f"{safe}.phases"
    phase_file.unlink(missing_ok=True)
    env = dict(python_child_env(os.environ), ZLF_NO_PROGRESS="1", NO_COLOR="1", **{_phases.ENV: str(phase_file)})
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    started = time.time()
    hung = False
    with open_nofollow(logs / f"{safe}.log", "w", root=root) as log:  # a --resume'd folder: no planted link
        log.write(f"$ {shlex.join(child_command(settings, spec, out))}\n")
        log.flush()
        proc = subprocess.Popen(child_command(settings, spec, out), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        if running is not None:
            running[spec] = proc
        try:
            proc.wait(timeout=settings["op_time_limit"] or None)
        except subprocess.TimeoutExpired:
            hung = True
            _kill(proc, log)
        finally:
            if running is not None:
                running.pop(spec, None)
    ended = time.time()
    return summarize(spec, proc.returncode, hung, started, ended, out, logs / f"{safe}.log", phase_file,
                     settings["op_time_limit"], gpu)


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def _run_dir(out: Path):
    dirs = sorted(p for p in out.glob("*") if p.is_dir()) if out.is_dir() else []
    return dirs[-1] if dirs else None


def _records(run_dir) -> list:
    """The run's complete records (core's reader: a line cut by a kill is skipped)."""
    from zlf.rundir import RunDir

    return RunDir(run_dir).records()[0] if run_dir is not None else []


def _last_error_line(log_path: Path) -> str:
    try:
        lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith("zlf: error:") or re.match(r"[A-Za-z_.]*(Error|Exception)\b", line):
            return line
    return lines[-1].strip() if lines else ""


def _finding(run_dir) -> str:
    """The run's named reference mismatch (meta.json, ``flaggems.ops.<op>.reference_mismatch``)."""
    from zlf.rundir import RunDir

    try:
        ops = RunDir(run_dir).meta()["flaggems"]["ops"]
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        return ""
    return "; ".join(f"{name}: {o['reference_mismatch']}" if len(ops) > 1 else o["reference_mismatch"]
                     for name, o in ops.items() if isinstance(o, dict) and o.get("reference_mismatch"))


#: how a point whose process died begins its error (zlf.supervise)
WORKER_DIED = "worker died:"


def summarize(spec, rc, hung, started, ended, out, log_path, phase_file, op_limit, gpu=None) -> dict:
    run_dir = _run_dir(out)
    recs = _records(run_dir)
    finding = _finding(run_dir) if run_dir is not None else ""
    ok = [r for r in recs if r.status == "ok"]
    failed = [r for r in recs if r.status != "ok"]
    unchecked = [r for r in ok if r.unchecked]
    timers: dict = {}
    for r in ok:
        timers[r.timer or "?"] = timers.get(r.timer or "?", 0) + 1
    fallbacks = sorted({_one_line(r.fallback_reason, 80) for r in recs if r.fallback_reason})
    lines = _phases.read(phase_file)
    costs = _phases.durations(lines, ended)
    last = lines[-1][2] if lines else "starting (python, torch, zlf imports)"
    skip, first_error = "", ""
    compiling = bool(lines) and lines[-1][1] == "compile"
    ticks = _phases.compiles(phase_file)
    recent = bool(ticks) and ended - ticks[-1][0] <= PROGRESS_WINDOW_S
    if hung and recent:  # killed while Triton was still compiling: slow, not hung
        status = COMPILE_LIMIT
        first_error = (f"no end within {op_limit:g} s, still compiling: {len(ticks)} Triton kernels compiled, "
                       f"the last {ended - ticks[-1][0]:.0f} s before the kill; killed while: {last} "
                       "(more time: --op-time-limit)")
    elif hung:
        status = "hung"
        first_error = (f"no end within {op_limit:g} s; killed while: {last}"
                       + (f" (no kernel compiled in its last {ended - ticks[-1][0]:.0f} s)" if ticks else ""))
    elif rc == 124 and compiling:  # the point limit struck in native compile code: slow, not hung
        status = COMPILE_LIMIT
        first_error = f"time limit during compile ({ended - lines[-1][0]:.1f} s in: {last})"
    elif rc == 124:
        status = "hung"
        first_error = next((r.error for r in failed if r.error), "") or _last_error_line(log_path)
    elif rc == 2:
        status = "refused"
        line = _last_error_line(log_path)
        line = line[len("zlf: error:"):].strip() if line.startswith("zlf: error:") else line
        if "FlagGems skips" in line:
            skip = line
        else:
            first_error = line
    elif rc in (0, 1) and recs and any((r.error or "").startswith(WORKER_DIED) for r in failed):
        # a point killed its process: zlf run's supervising parent filed it and went on
        died = next(r for r in failed if (r.error or "").startswith(WORKER_DIED))
        status = "crashed"
        first_error = f"{died.error} at point {died.point}"
    elif rc in (0, 1) and recs:
        status = "ok" if not failed else "failed"
        first_error = next((r.error for r in failed if r.error), "")
        if failed and all((r.error or "").startswith("time limit during compile") for r in failed):
            status = COMPILE_LIMIT  # each failed point ran past --time-limit in its first FlagGems call
        if finding:  # what the failures mean, before the first of them
            first_error = f"{finding}: {first_error}" if first_error else finding
    else:
        status = "crashed"
        first_error = f"exit {rc} while: {last}; last log line: {_last_error_line(log_path)}"
    startup = (lines[0][0] - started) if lines else (ended - started)
    row = {
        "op": op_name(spec), "spec": spec, "status": status, "points": len(recs), "ok": len(ok),
        "failed": len(failed), "unchecked": len(unchecked),
        "timers": " ".join(f"{t}:{n}" for t, n in sorted(timers.items())),
        "device_timed": sum(n for t, n in timers.items() if t in DEVICE_TIMERS),
        "fallback": "; ".join(fallbacks), "reference_mismatch": finding, "skip_reason": _one_line(skip), "first_error": _one_line(first_error),
        "wall_s": round(ended - started, 2), "startup_s": round(max(0.0, startup), 2),
        "import_s": round(costs.get("import", 0.0), 2), "plan_s": round(costs.get("plan", 0.0), 2),
        "inputs_s": round(costs.get("inputs", 0.0), 2), "compile_s": round(costs.get("compile", 0.0), 2),
        "measure_s": round(costs.get("measure", 0.0), 2), "last_phase": _one_line(last, 120),
        "rc": rc if not hung else None, "gpu": gpu, "run_dir": str(run_dir) if run_dir else None,
    }
    return row


# ----------------------------------------------------------------------------- the sweep
def _new_sweep(args) -> tuple:
    co = _checkout.checkout_from_options({"flaggems_dir": args.flaggems_dir})
    if co is None:
        raise UsageError(f"zlf sweep: no FlagGems checkout given: use --flaggems-dir DIR or {_checkout.ENV_DIR}=DIR")
    all_ops = list_ops(co)
    if not all_ops:
        raise UsageError(f"zlf sweep: no benchmark op (pytest mark) in {co.bench_dir}/test_*.py")
    named = ",".join([*(args.ops or ()), *([args.ops_option] if args.ops_option else [])])
    if named and args.sample is not None:
        raise UsageError("zlf sweep: name the ops or --sample N of them, not both")
    chosen = choose_ops(all_ops, named, args.sample, args.sample_seed)
    if args.op_time_limit is None:
        args.op_time_limit = DEFAULT_OP_LIMIT
    try:
        shlex.split(args.run_args or "")
    except ValueError as exc:
        raise UsageError(f"--run-args {args.run_args!r}: {exc}") from exc
    settings = {
        "flaggems_dir": str(co.root), "layout": co.layout, "ops": chosen, "all_ops": len(all_ops),
        "sample": args.sample, "seed": args.sample_seed, "op_time_limit": args.op_time_limit,
        "time_limit": args.time_limit, "compile_time_limit": args.compile_time_limit,
        "max_shapes": args.max_shapes, "check": args.check,
        "run_exts": list(args.run_ext or DEFAULT_RUN_EXTS), "run_args": args.run_args or "",
    }
    from zlf.rundir import RunDir

    root = RunDir.create(args.out, args.name or "flaggems").path.resolve()
    # its fields become the ops' command lines and the checkout they import: signed, as a campaign is
    write_atomic(root / STATE, json.dumps(seal(settings), indent=2) + "\n")
    return root, settings


def _resume(path: str) -> tuple:
    root = Path(path).resolve()
    try:  # a bounded regular file of strict JSON (zlf.readers)
        settings = readers.read_json(root / STATE, what=STATE)
    except OSError as exc:
        raise UsageError(f"--resume {path!r}: not a sweep directory (no readable {STATE})") from exc
    except readers.BadFile as exc:
        raise UsageError(f"--resume {path!r}: not a sweep directory ({STATE}: {exc.problem})") from None
    ops = settings.get("ops") if isinstance(settings, dict) else None
    if (not isinstance(ops, list) or not all(isinstance(o, str) for o in ops)
            or not isinstance(settings.get("flaggems_dir"), str)):
        raise UsageError(f"--resume {path!r}: {STATE} is not a sweep's (expected an object with a list of ops "
                         "and flaggems_dir)")
    if not sealed_by_me(settings):
        raise UsageError(f"--resume {path!r}: {STATE}'s ops, checkout and arguments are not what zlf sweep wrote "
                         "for this user (edited, or made by another user or machine): refusing to run them; "
                         "start a new sweep")
    ensure_dir(root / "logs", root)  # a received folder: no planted link under it
    defaults = {"op_time_limit": DEFAULT_OP_LIMIT, "time_limit": 60.0, "compile_time_limit": 0.0, "check": "fail",
                "max_shapes": None,
                "run_exts": list(DEFAULT_RUN_EXTS), "run_args": ""}
    return root, {**defaults, **settings}


def _kill_running(running: dict) -> None:
    """SIGKILL the process group of every op still running (each is a session of its own)."""
    for proc in list(running.values()):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def read_rows(root: Path) -> list:
    """The finished ops' rows of ``sweep.jsonl``; a line that is not one (torn by a kill, not
    UTF-8, not an object with a spec) is skipped, so that op runs again on ``--resume``."""
    try:
        return readers.read_jsonl(root / LINES, schema=ROW_SCHEMA, what=LINES)[0]
    except OSError:
        return []


def _gpus(text):
    if not text:
        return [None]
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus):
        raise UsageError(f"--gpus {text!r}: expected GPU indices, e.g. 0,1,2,3")
    return gpus


def _worker_names(gpus) -> list:
    """Scheduler names of the workers: the GPU index (``0``), ``0+1`` for a second worker on GPU 0."""
    names, seen = [], {}
    for g in gpus:
        key = "0" if g is None else str(g)
        seen[key] = seen.get(key, 0) + 1
        names.append(key if seen[key] == 1 else f"{key}+{seen[key] - 1}")
    return names


def summary_line(rows: list) -> str:
    counts: dict = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    ok_points = sum(r["ok"] for r in rows)
    device = sum(r.get("device_timed", 0) for r in rows)
    unchecked = sum(r.get("unchecked", 0) for r in rows)
    share = f"{100.0 * device / ok_points:.1f} %" if ok_points else "n/a"
    host = f"{100.0 * (ok_points - device) / ok_points:.1f} %" if ok_points else "n/a"
    parts = ", ".join(f"{counts[s]} {s}" for s in ("ok", "failed", "refused", "hung", COMPILE_LIMIT, "crashed")
                      if s in counts)
    wall = sum(r["wall_s"] for r in rows)
    return (f"{len(rows)} ops: {parts or 'none'}; {ok_points} ok points ({unchecked} UNCHECKED): {share} on a "
            f"device timer ({'/'.join(DEVICE_TIMERS)}), {host} on host-inclusive timers; "
            f"{wall:.0f} s of op wall time")


def cost_line(rows: list) -> str:
    keys = ("startup_s", "import_s", "plan_s", "inputs_s", "compile_s", "measure_s")
    total = sum(r["wall_s"] for r in rows) or 1.0
    parts = [f"{k[:-2]} {sum(r.get(k, 0.0) for r in rows):.0f} s ({100 * sum(r.get(k, 0.0) for r in rows) / total:.0f} %)"
             for k in keys]
    return "where the time went: " + ", ".join(parts)


def write_table(root: Path, rows: list) -> None:
    def cell(v):
        return "" if v is None else str(v).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")

    text = "\t".join(FIELDS) + "\n" + "".join("\t".join(cell(r.get(f)) for f in FIELDS) + "\n" for r in rows)
    write_atomic(root / TABLE, text)


def main(args, session) -> int:
    from zlf.console import clean
    from zlf.output import render

    gpus = _gpus(args.gpus)
    if args.resume:
        root, settings = _resume(args.resume)
        if args.op_time_limit is not None:
            if args.op_time_limit < 0:
                raise UsageError(f"--op-time-limit {args.op_time_limit:g}: expected seconds >= 0 (0: no limit)")
            settings["op_time_limit"] = args.op_time_limit
        if args.flaggems_dir:  # the same checkout at another place (a fresh machine)
            settings["flaggems_dir"] = str(_checkout.find_checkout(args.flaggems_dir, "--flaggems-dir").root)
    else:
        root, settings = _new_sweep(args)
    done = {r["spec"] for r in read_rows(root)}
    todo = [s for s in settings["ops"] if s not in done]
    total, start = len(settings["ops"]), time.time()
    print(f"sweep dir: {root}\n{len(todo)} of {total} ops to run"
          + (f" ({len(done)} finished before)" if done else "")
          + f", {len(gpus)} at a time", file=sys.stderr, flush=True)
    from zlf.scheduler import Scheduler, Unit

    # core's scheduler (zlf run --gpus): one unit per op; a crash is the op's outcome, never retried
    sched = Scheduler([Unit(id=spec, keys=(spec,)) for spec in todo], retries=0)
    names = _worker_names(gpus)
    for name in names:
        sched.add_worker(name)
    lock = threading.Lock()
    finished = [len(done)]
    running: dict = {}
    stopped = threading.Event()

    failures: list = []  # what stopped a worker thread (writing sweep.jsonl), raised by main

    def worker(gpu, name):
        while not stopped.is_set():
            with lock:
                unit = sched.take(name)
            if unit is None:
                return
            row = run_op(settings, root, unit.id, gpu, running)
            if stopped.is_set():
                return  # killed by the stop, not by itself: --resume runs it again
            with lock:
                sched.done(unit.id, name, seconds=row["wall_s"], runs=1, failed_runs=int(row["status"] != "ok"))
                try:
                    with open_nofollow(root / LINES, "a") as f:
                        f.write(json.dumps(row) + "\n")
                except OSError as exc:  # a full disk: the sweep stops, main says so in one line
                    failures.append(OSError(exc.errno, exc.strerror, str(root / LINES)))
                    stopped.set()
                    _kill_running(running)
                    return
                finished[0] += 1
                print(f"[{finished[0]}/{total}] {clean(row['op'])}: {row['status']} ({row['ok']} ok, "
                      f"{row['failed']} failed) {row['wall_s']:.1f} s; elapsed {time.time() - start:.0f} s",
                      file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker, args=(g, n), daemon=True) for g, n in zip(gpus, names)]
    from zlf.procs import stop_code

    # Ctrl-C, and SIGTERM (core turns it into zlf.procs.Terminated, a KeyboardInterrupt): the
    # running ops' process groups, sessions of their own, are killed before the sweep exits
    code = 0
    try:
        for t in threads:  # inside the try: a stop while they start is a stop too
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except KeyboardInterrupt as exc:
        code = stop_code(exc)  # 130 (Ctrl-C) or 143 (SIGTERM)
        stopped.set()
        while True:
            try:
                _kill_running(running)
                for t in threads:
                    if t.is_alive():
                        t.join(15)
                break
            except KeyboardInterrupt:  # a second stop while stopping: finish stopping
                continue
    interrupted = bool(code)
    if failures and not interrupted:
        for t in threads:
            t.join(15)
        raise failures[0]  # the CLI's one line for a full disk; the rows written stay for --resume
    by_spec = {r["spec"]: r for r in read_rows(root)}
    rows = [by_spec[s] for s in settings["ops"] if s in by_spec]
    write_table(root, rows)
    if len(gpus) > 1:
        print(sched.summary_table(), file=sys.stderr)
    if args.format == "json":
        print(json.dumps({"sweep_dir": str(root), "settings": settings, "ops": rows,
                          "summary": summary_line(rows), "finished": len(rows), "total": total}, indent=2))
        return code if interrupted else nothing_measured(rows)
    print(render(TABLE_FIELDS, [[r.get(f) for f in TABLE_FIELDS] for r in rows], args.format))
    print(clean(summary_line(rows)))
    print(clean(cost_line(rows)))
    print(f"sweep dir: {root} ({TABLE}, {LINES}, logs/, runs/)")
    if interrupted or len(rows) < total:
        print(f"interrupted: {len(rows)} of {total} ops finished; the rest: zlf sweep --resume {root}", file=sys.stderr)
        return code if interrupted else 0
    return nothing_measured(rows)


def nothing_measured(rows: list) -> int:
    """1, with a line on stderr, when no op of a finished sweep ran a single point ok (a missing
    dependency such as pytest, a checkout that does not import): the sweep measured nothing. A
    sweep in which some ops fail is a table to read, exit 0."""
    from zlf.console import clean

    if not rows or any(r.get("ok") for r in rows):
        return 0
    first = next((r.get("first_error") or r.get("skip_reason") for r in rows if r.get("first_error")
                  or r.get("skip_reason")), "")
    print(clean(f"zlf sweep: no op ran a point ok ({len(rows)} op(s)); first error: {first or 'none recorded'}"),
          file=sys.stderr)
    return 1
