"""Where a campaign keeps what: the campaign directory's names, the run states, and the split of
a shared process's run directory into the per-op ones.

Layout::

    <parent>/ab_<label>_<YYYYmmdd-HHMMSS>/
      campaign.json        the plan, the sides, every run's status and start/end; rewritten
                           atomically after every change, so a killed campaign can be resumed
      summary.log          the summary table and every guard's message (plain text)
      summary.json         per-point statistics (read by ``--noise-from``)
      report.md            markdown report; delta_intervals.png its plot
      _config/<A|B>.json   each side's run configuration (zlf.config.RunConfig): every run of
                           the side is ``zlf run --config`` of it (with what a run needs added,
                           in <op>/logs/r<k>_<A|B>.json beside its log)
      <op>/r<k>_<A|B>/     one run directory per op, round and side (``zlf run`` wrote it)
      <op>/logs/r<k>_<A|B>.txt   that run's stdout and stderr
      _shared/logs/r<k>_<A|B>.txt  output of a process that ran every op of a round and side
      triton_cache/<A|B>-<hash>/ one Triton cache per side definition (unless --triton-cache)
"""
from __future__ import annotations

import datetime as _dt
import os
import shutil
from pathlib import Path

import yaml

from ..records import shape_str
from ..rundir import LOG, META, RESULTS, SHAPES, RunDir, write_atomic

CAMPAIGN = "campaign.json"
SUMMARY_LOG = "summary.log"
SUMMARY_JSON = "summary.json"
REPORT = "report.md"
PLOT = "delta_intervals.png"
STAGING = ".staging"
LOGS = "logs"
FORMAT_VERSION = 1

#: where each side's run configuration is (an op may not have this name).
CONFIGS = "_config"
#: where processes that run several ops write (an op may not have this name).
SHARED = "_shared"
#: ``campaign.json``'s ``process``: one process per (op, round, side), or per (round, side).
PER_OP, SHARED_PROCESS = "per-op", "shared"

PENDING, RUNNING, OK, FAILED, SKIPPED = "pending", "running", "ok", "failed", "skipped"
#: campaign status words.
C_RUNNING, C_COMPLETE, C_INTERRUPTED = "running", "complete", "interrupted"
#: a campaign stopped by a full disk (or a file-size limit): its finished runs are kept, --resume goes on
C_DISK_FULL = "disk full"


def now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def inside_dir(path: Path, parent: Path) -> bool:
    try:
        Path(path).relative_to(parent)
        return True
    except ValueError:
        return False


def link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)  # the shared process's files are final: a link costs no space
    except OSError:
        shutil.copy2(src, dst)


def read_shared(raw: Path) -> tuple:
    """``(records, shapes, meta)`` of a shared process's run directory, read once for every op
    :func:`split_run_dir` splits off it (a library's process holds hundreds)."""
    src = RunDir(raw)
    return src.records()[0], src.shapes() or {}, src.meta()


def split_run_dir(raw: Path, dest: Path, names: set, points: int, shared: dict, hooks=None, source=None) -> None:
    """Write the run directory of the ops ``names`` from a shared process's ``raw`` one: their
    records and shapes, meta.json with their counts and a ``shared_process`` section, the whole
    run.log, and every other file whole -- unless an extension splits it by shape
    (``campaign_split_item``). ``source``: :func:`read_shared` of ``raw``, when the caller has it."""
    all_records, all_shapes, meta = source if source is not None else read_shared(raw)
    meta = dict(meta)
    final, dest = dest, dest.with_name(f".{dest.name}.split")  # in place only once whole
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    out = RunDir(dest)
    records = [r for r in all_records if r.op in names]
    for r in records:
        out.append(r)
    shapes = {op: v for op, v in all_shapes.items() if op in names}
    write_atomic(dest / SHAPES, yaml.safe_dump(shapes, sort_keys=False, default_flow_style=None))
    ran_status = meta.get("status")
    if isinstance(meta.get("op_args"), list):  # this op's arguments: a library's process has hundreds
        meta["op_args"] = [a for a in meta["op_args"] if isinstance(a, dict) and set(a.get("ops") or ()) & names]
    meta.update(ops=sorted(names), points=points, status="complete",
                counts={s: sum(1 for r in records if r.status == s) for s in ("ok", "FAILED", "OOM")},
                shared_process={**shared, "status": ran_status})
    out.write_meta(meta)
    if (raw / LOG).is_file():
        shutil.copyfile(raw / LOG, dest / LOG)
    own_shapes = {shape_str(r.shape) for r in records}
    for item in raw.iterdir():
        if item.name in (RESULTS, META, LOG, SHAPES):
            continue
        if hooks is not None and hooks.campaign_split_item(item, dest / item.name, own_shapes, link_or_copy):
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, copy_function=link_or_copy)
        else:
            link_or_copy(item, dest / item.name)
    os.replace(dest, final)
