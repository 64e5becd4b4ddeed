"""``zlf run --gpus LIST`` (or ``--executor ray``): one run's ops spread over GPUs, merged into
the normal run directory (docs/scale.md).

Each op argument is a work unit: a ``zlf run OP`` process on one worker's GPU. With one worker
(``--gpus 0``) the whole command is one unit, so the run directory is exactly the plain path's;
with several, the shards' directories are merged: results.jsonl in op order, shapes.yaml and
run.log joined, meta.json the first shard's with summed counts and a ``scale`` section naming
each shard's GPU. Any other file (IR, autotune records) is merged as a tree; a name two shards
both wrote is kept under ``shards/<k>/`` and listed in meta.json.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import yaml

from .errors import UsageError
from .procs import stop_code, stop_word
from .executors import ROOT, LocalPool, device_identity, make_executor, parse_gpus, pin_variable
from .rundir import LOG, META, RESULTS, SHAPES, RunDir, timestamp
from .scheduler import Scheduler, Unit
from .streams import last_word

#: each shard's run configuration, beside its staging folder (zlf.config.RunConfig)
CONFIG = "config.json"
BUILTIN_SUITE = ("add", "softmax", "matmul")


class ShardJob:
    """A sharded run as an executor sees it: one spec per unit, outcomes kept for the merge."""

    def __init__(self, root: Path, specs: dict):
        self.root = root
        self.specs = specs
        self.outcomes: dict = {}
        self.workers: dict = {}
        self.done = 0

    def spec(self, key: str) -> dict:
        return self.specs[key]

    def skip(self, unit):
        return None

    def started(self, key: str, worker: dict) -> None:
        self.workers[key] = worker

    def finished(self, key: str, outcome: dict, worker: dict) -> bool:
        self.outcomes[key], self.workers[key] = outcome, worker
        self.done += 1
        what = "ok" if outcome["rc"] == 0 else f"exit code {outcome['rc']}"
        print(f"[{self.done}/{len(self.specs)}] {self.specs[key]['label']} {what} on {worker.get('gpu')} "
              f"{outcome['seconds']:.1f}s", file=sys.stderr, flush=True)
        return outcome["rc"] == 0

    def skipped(self, keys, reason: str) -> None:
        pass

    def lost(self, unit) -> None:
        for key in unit.keys:
            self.outcomes.pop(key, None)

    def discard(self, key: str) -> None:
        shutil.rmtree(self.root / key, ignore_errors=True)

    def identity(self, key: str) -> str:
        d = self.root / self.specs[key]["dir"]
        return device_identity(d) if d.is_dir() else ""

    def note(self, text: str) -> None:
        print(f"zlf: {text}", file=sys.stderr, flush=True)


def _unique(parent: Path, name: str) -> Path:
    for k in range(1000):
        path = parent / (name if k == 0 else f"{name}-{k}")
        if not path.exists():
            return path
    raise UsageError(f"cannot place run directory {name!r} under {str(parent)!r}")


def _merge_tree(src: Path, dst: Path, conflicts: Path, found: list) -> None:
    for item in sorted(src.iterdir()):
        target = dst / item.name
        if item.is_dir() and target.is_dir():
            _merge_tree(item, target, conflicts / item.name, found)
        elif target.exists():
            conflicts.mkdir(parents=True, exist_ok=True)
            shutil.move(str(item), str(conflicts / item.name))
            found.append(str((conflicts / item.name)))
        else:
            shutil.move(str(item), str(target))


def merge(shards: list, dest: Path, argv: list) -> dict:
    """Merge shard run directories (in op order) into ``dest``; returns the merged meta."""
    rd = RunDir(dest)
    metas, shapes, conflicts = [], {}, []
    with open(dest / RESULTS, "a") as results, open(dest / LOG, "a") as log:
        for k, (src, info) in enumerate(shards):
            src = Path(src)
            if (src / RESULTS).is_file():
                results.write((src / RESULTS).read_text())
            if (src / LOG).is_file():
                log.write(f"=== shard {k}: {' '.join(info['ops'])} on {info.get('gpu')} ===\n")
                log.write((src / LOG).read_text())
            shapes.update(RunDir(src).shapes() or {})
            metas.append(RunDir(src).meta())
            for name in (RESULTS, LOG, SHAPES, META):
                (src / name).unlink(missing_ok=True)
            _merge_tree(src, dest, dest / "shards" / str(k), conflicts)
    (dest / SHAPES).write_text(yaml.safe_dump(shapes, sort_keys=False, default_flow_style=None))
    meta = dict(metas[0]) if metas else {}
    meta["command"] = argv
    meta["ops"] = sorted({o for m in metas for o in m.get("ops", [])})
    meta["points"] = sum(m.get("points", 0) for m in metas)
    counts: dict = {}
    for m in metas:
        for key, n in (m.get("counts") or {}).items():
            counts[key] = counts.get(key, 0) + n
    meta["counts"] = counts
    statuses = [m.get("status") for m in metas]
    meta["status"] = next((s for s in statuses if s != "complete"), "complete")
    meta["started"] = min((m["started"] for m in metas if m.get("started")), default=None)
    meta["finished"] = max((m["finished"] for m in metas if m.get("finished")), default=None)
    meta["warnings"] = list(dict.fromkeys(w for m in metas for w in m.get("warnings") or []))
    if conflicts:
        meta["merge_conflicts"] = conflicts
    rd.write_meta(meta)
    return meta


def _op_args(args) -> list:
    return list(args.ops) if args.ops else list(BUILTIN_SUITE)


def shard_config(session, ops):
    """The configuration of one shard's ``zlf run``: the parent's, for ``ops``, with exactly the
    extensions active here (install order never decides), on its worker's only device."""
    active = tuple(i.name for i in session.hooks.infos if i.status == "active")
    select = dict(ext=active, no_ext=None) if active else dict(ext=None, no_ext=tuple(i.name for i in session.hooks.infos))
    return session.config.with_changes(ops=tuple(ops), device=0, out="runs", name=None, summary_format="table", gpus=None,
                                       executor=None, ray_address=None, retries=None, **select)


def main(args, session) -> int:

    gpus = parse_gpus(args.gpus)
    if args.device not in (None, 0) and gpus:
        raise UsageError("--gpus pins each worker to its GPU: drop --device")
    pin = pin_variable(session, args.backend)
    executor = make_executor(args.executor, gpus, pin, args.retries, args.ray_address)
    one = isinstance(executor, LocalPool) and len(executor.gpus) == 1
    groups = [list(args.ops)] if one or len(_op_args(args)) == 1 else [[o] for o in _op_args(args)]
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    root = _unique(out, f".zlf-shards-{timestamp()}")
    root.mkdir()
    specs, units = {}, []
    for k, ops in enumerate(groups):
        key = f"s{k}"
        shard_config(session, ops).write(root / key / CONFIG)  # a file, shipped to a Ray node as a need
        name = ["--name", args.name] if args.name and len(groups) == 1 else []
        argv = [sys.executable, "-m", "zlf", "run", "--config", f"{ROOT}/{key}/{CONFIG}",
                "--out", f"{ROOT}/{key}/.staging", *name]
        specs[key] = {"key": key, "argv": argv, "env": {"ZLF_NO_PROGRESS": "1", "NO_COLOR": "1"}, "cwd": os.getcwd(),
                      "staging": f"{key}/.staging", "dir": f"{key}/run", "log": f"{key}/output.txt",
                      "needs": [f"{key}/{CONFIG}"], "label": " ".join(ops) or "builtin", "ops": ops or list(BUILTIN_SUITE)}
        units.append(Unit(key, [key], group=key))
    print(f"zlf run: {len(units)} unit(s) on {executor.describe()}", file=sys.stderr, flush=True)
    job = ShardJob(root, specs)
    scheduler = Scheduler(units, retries=executor.retries)
    try:
        executor.run(job, scheduler)
    except KeyboardInterrupt as exc:
        last_word(f"\n{stop_word(exc)}; shards so far kept in {root}")
        return stop_code(exc)
    except Exception:
        shutil.rmtree(root, ignore_errors=True)
        raise
    shards, missing, crashed = [], [], {}
    for key, spec in specs.items():
        outcome = job.outcomes.get(key)
        if outcome and outcome["rc"] != 0:
            crashed[spec["label"]] = outcome["rc"]
            log = root / spec["log"]
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.is_file() else []
            print(f"zlf: shard {spec['label']} failed (exit code {outcome['rc']})"
                  + ("; its points so far are kept" if outcome["made"] else "") + "\n  " + "\n  ".join(tail),
                  file=sys.stderr)
        if outcome and outcome["made"]:
            worker = job.workers.get(key) or {}
            shards.append((root / spec["dir"], {"ops": spec["ops"], "gpu": worker.get("gpu"), "pin": worker.get("pin"),
                                                "node": worker.get("node"), "device": job.identity(key),
                                                "rc": outcome["rc"], "name": outcome["name"]}))
        else:
            missing.append(spec["label"])
            if spec["label"] not in crashed:
                log = root / spec["log"]
                tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.is_file() else []
                print(f"zlf: {spec['label']}: no run directory ({scheduler.reasons.get(key) or 'see below'})\n  "
                      + "\n  ".join(tail), file=sys.stderr)
    # bad input (exit 2) of a shard is bad input of the whole command
    bad_rc = 2 if 2 in crashed.values() else 1
    if not shards:
        shutil.rmtree(root, ignore_errors=True)
        print("zlf: nothing was run", file=sys.stderr)
        return bad_rc
    scale = {"gpus": gpus, "executor": executor.name, "pin": pin, "shards": [info for _, info in shards],
             "workers": scheduler.summary_rows()}
    if len(groups) == 1:
        dest = _unique(out, shards[0][1]["name"])
        os.replace(shards[0][0], dest)
        meta = RunDir(dest).meta()
    else:
        label = args.name or ("builtin" if not args.ops else "suite")
        dest = RunDir.create(out, label).path
        meta = merge(shards, dest, ["zlf", *sys.argv[1:]])
    meta["scale"] = scale
    RunDir(dest).write_meta(meta)
    shutil.rmtree(root, ignore_errors=True)
    records, _ = RunDir(dest).records()
    failed = sum(1 for r in records if r.status == "FAILED") + len(missing) + len(crashed)
    rc = bad_rc if crashed else (1 if failed else 0)
    from .output import print_run_summary

    lines = []
    if missing:
        lines.append(f"{len(missing)} unit(s) not run: {', '.join(missing)}")
    if crashed:
        lines.append(f"{len(crashed)} shard(s) failed: " + ", ".join(f"{k} (exit code {v})" for k, v in crashed.items()))
    if args.format != "json":
        print("per worker (GPU):\n" + scheduler.summary_table(), file=sys.stderr)
    print_run_summary(records, args.format, dest, lines=lines)
    return rc
