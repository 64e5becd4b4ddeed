"""Explain each decided point of an A/B campaign: configs, IR diff, counters, environment, repro.

``zlf triage CAMPAIGN [POINT...]`` (or ``zlf ab ... --triage``, after the campaign) writes
``CAMPAIGN/triage/<point>/`` per point -- by default every FASTER or SLOWER point -- holding
``triage.md`` (both sides' autotune choice, the IR diff with op-count changes, the A-vs-B counter
table with the deltas beyond their noise in bold, the environment diff, one command per side that
reproduces the measurement alone), ``bundle.json``, ``ir/`` (unified diffs) and ``profile_A/``,
``profile_B/`` (as ``zlf profile`` writes them). ``CAMPAIGN/triage/triage.md`` ranks the points by
the size of their delta, regressions first, one line each. Profiling runs in separate processes,
after every timing run; without a profiler the bundle is written without counters and says why.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from tabulate import tabulate
from zlf import UsageError, readers
from zlf.console import md_table
from zlf.records import Point, shape_str
from zlf.redact import redact, redact_text
from zlf.rundir import RunDir, ensure_dir, write_atomic

from . import ncu
from .launches import TRITON_TYPES
from .profile import CALLS, NO_PROFILER, Profile, Target, replace_dir, add_profiler_options, folder_name, profile_point

EPILOG = """\
examples:
  zlf triage runs/ab_DISABLE_MMA_V3_20261201-120000            every FASTER / SLOWER point
  zlf triage CAMPAIGN matmul/4096x4096x4096/float16 --calls 5  one point (any verdict)
  zlf ab --switch DISABLE_MMA_V3 matmul --triage               triage right after the campaign
exit codes: 0 bundles written, 2 bad input
"""

TRIAGE_DIR = "triage"
INDEX = "triage.md"
BUNDLE_JSON = "bundle.json"
#: what triage reads of an autotune record file (the autotune_replay extension's format)
_DECISIONS = {"type": "object", "properties": {"decisions": {"type": "array", "items": {"type": "object"}}}}
#: what the index reads of a point's bundle.json (zlf.readers checks it; one that is not one is left out)
BUNDLE_SCHEMA = {
    "type": "object", "required": ["point"],
    "properties": {"point": {"type": "string"}, "verdict": {"type": ["string", "null"]},
                   "delta_pct": {"type": ["number", "null"]}, "a_ms": {"type": ["number", "null"]},
                   "b_ms": {"type": ["number", "null"]}, "dir": {"type": "string"}},
}
BUNDLE_MD = "triage.md"
SHAPES = "shapes.yaml"
DECIDED = ("SLOWER", "FASTER")


def configure_parser(p) -> None:
    p.add_argument("campaign", metavar="CAMPAIGN", help="a finished zlf ab campaign directory")
    p.add_argument("points", nargs="*", metavar="POINT", help="points to triage (default: every FASTER or SLOWER point)")
    p.add_argument("--out", metavar="PARENT",
                   help=f"parent of the {TRIAGE_DIR}/ folder the bundles go to (default: the campaign directory)")
    add_profiler_options(p)
    p.add_argument("--no-profile", action="store_true", help="write the bundles without counters (no profiler process)")


def add_campaign_options(parser) -> None:
    g = parser.add_argument_group("profile (extension)")
    g.add_argument("--triage", action="store_true",
                   help="after the campaign, write a triage bundle per FASTER/SLOWER point (zlf triage; docs/triage.md)")
    g.add_argument("--triage-calls", type=CALLS, default=3, metavar="N", help="profiled calls per side and point (default 3)")


# ----------------------------------------------------------------------------- the campaign's points
def _runs_of_point(campaign, point_id: str):
    """``(op spec, round, run A, run B, record A, record B)`` of the first round where both sides
    ran the point ok."""
    for op in campaign.ops:
        for k in range(1, campaign.planned_rounds() + 1):
            ra, rb = campaign.find(op.name, k, "A"), campaign.find(op.name, k, "B")
            if not (ra and rb and ra["status"] == "ok" and rb["status"] == "ok"):
                continue
            recs = []
            for r in (ra, rb):
                records, _ = RunDir(campaign.run_dir(r)).records()
                recs.append(next((x for x in records if x.point == point_id), None))
            if recs[0] is None and recs[1] is None:
                break  # not this op's point
            if recs[0] is not None and recs[1] is not None and recs[0].status == recs[1].status == "ok":
                return op, k, ra, rb, recs[0], recs[1]
    return None


def _recorded_decisions(run_dir: Path, meta: dict, point_id: str) -> list:
    """The point's decisions in the autotune record files (``autotune_records/``) of the run, or
    of the record it replayed, for runs whose records carry no per-point ``autotune`` field."""
    auto = meta.get("autotune") or {}
    source = Path(auto["source"]) if auto.get("mode") == "replay" and auto.get("source") else run_dir
    out = []
    for f in sorted((source / "autotune_records").glob("*.json")):
        try:
            doc = readers.read_json(f, schema=_DECISIONS, limit=readers.LIMITS["record"])
        except (OSError, UsageError):
            continue
        for d in doc.get("decisions") or ():
            if d.get("point") == point_id:
                how = "replayed from the record" if source != run_dir else d.get("how", "")
                out.append({"kernel": doc.get("kernel", "?"), "config": d.get("config"), "how": how})
    return out


def _autotune_lines(record, run_dir: Optional[Path] = None, meta: Optional[dict] = None) -> list:
    used = (record.extra or {}).get("autotune") if record is not None else None
    if not used and run_dir is not None and record is not None:
        used = _recorded_decisions(Path(run_dir), meta or {}, record.point)
    if not used:
        return ["no autotune decision recorded (autotune_replay not active, or no kernel of the point is autotuned)"]
    out = []
    for d in used:
        cfg = d.get("config") or {}
        kw = " ".join(f"{k}={v}" for k, v in (cfg.get("kwargs") or {}).items())
        rest = " ".join(f"{k}={cfg[k]}" for k in ("num_warps", "num_stages", "num_ctas", "maxnreg") if cfg.get(k) is not None)
        how = d.get("how", "")
        if d.get("fallback_reason"):
            how += f", fallback: {d['fallback_reason']}"
        out.append(f"{d.get('kernel', '?').rsplit('.', 1)[-1]}: {kw} {rest} ({how})".replace("  ", " "))
    return out


#: why a bundle has no IR comparison when the ir_dump extension (its IR tree format) is not installed.
NO_IR_DUMP = "no IR comparison: the ir_dump extension is not installed here"


def _index_rows(root) -> dict:
    from zlf_ir_dump.irtree import read_index

    return {r.get("file"): r for r in read_index(root) if r.get("file")} if root else {}


def why_no_ir(run: Path) -> str:
    """Why a run directory holds no IR tree, from its meta.json: the cpu backend compiles none,
    or the ir_dump extension was not active, or it was and wrote none."""
    try:
        meta = json.loads((Path(run) / "meta.json").read_text())
    except (OSError, ValueError):
        return "its meta.json cannot be read"
    if meta.get("backend") == "cpu":
        return "the cpu backend compiles no IR: its kernels run under the Triton interpreter"
    active = {e.get("name") for e in meta.get("extensions") or () if isinstance(e, dict)}
    if "ir_dump" not in active:
        return "ir_dump was not active"
    return "ir_dump was active but wrote no IR tree: no kernel was compiled in that run"


def ir_changes(run_a: Path, run_b: Path, point: Point, out_dir: Path) -> tuple:
    """The point's IR diff: ``(rows, key changes, why empty)`` with unified diffs under ``out_dir``
    (read with the ir_dump extension: without it, only why)."""
    try:
        from zlf_ir_dump.irtree import CHANGED, ONLY_A, ONLY_B, diff_kernels, format_counts, ir_root, op_count_delta, unified_diff
    except ImportError:
        return [], [], NO_IR_DUMP
    a_root, b_root = ir_root(run_a), ir_root(run_b)
    if a_root is None or b_root is None:
        missing = [run for run, root in ((run_a, a_root), (run_b, b_root)) if root is None]
        return [], [], "no IR tree on " + ("either side" if a_root is b_root is None else ("side A" if a_root is None else "side B")) + \
            f" ({why_no_ir(missing[0])})"
    shape = shape_str(point.shape)
    ty = TRITON_TYPES.get(point.dtype)
    index = {**_index_rows(a_root), **_index_rows(b_root)}

    def of_dtype(kernel_dir: str, name: str) -> bool:
        row = index.get(f"{shape}/{kernel_dir}/{name.rsplit('.', 1)[0]}")
        if row is None or not ty:
            return True
        return f"*{ty}" in (row.get("signature") or "").split(",")

    rows, changes = [], []
    for d in diff_kernels(a_root, b_root):
        if d.shape != shape:
            continue
        if d.status in (ONLY_A, ONLY_B):
            files = [n for n in (d.only_a_files or d.only_b_files) if of_dtype(d.kernel, n)]
            if files:
                rows.append([d.kernel, d.status, ", ".join(files), ""])
            continue
        if d.status != CHANGED:
            if any(of_dtype(d.kernel, n) for n in d.a_files):
                rows.append([d.kernel, "identical", ", ".join(n for n in d.a_files if of_dtype(d.kernel, n)), ""])
            continue
        for name in d.changed_files:
            if not of_dtype(d.kernel, name):
                continue
            a_text, b_text = d.a_files[name].read_text(errors="replace"), d.b_files[name].read_text(errors="replace")
            delta = op_count_delta(a_text, b_text)
            target = out_dir / d.kernel / f"{name}.diff"
            ensure_dir(target.parent, out_dir)
            rel = f"{shape}/{d.kernel}/{name}"
            write_atomic(target, unified_diff(d.a_files[name], d.b_files[name], f"A/{rel}", f"B/{rel}"), root=out_dir)
            rows.append([d.kernel, "changed", name, format_counts(delta) or "same op counts"])
            changes.append(delta)
        for name in d.only_a_files + d.only_b_files:
            if of_dtype(d.kernel, name):
                rows.append([d.kernel, "changed", f"{name} (only {'A' if name in d.only_a_files else 'B'})", ""])
    return rows, changes, "" if rows else f"no IR file of shape {shape} ({point.dtype}) on either side"


def key_change(changes) -> str:
    """``ttng.warp_group_dot → tt.dot``: the first key op that went away and the first that came."""
    gone = [op for delta in changes for op, a, b in delta if a > 0 and b == 0]
    came = [op for delta in changes for op, a, b in delta if a == 0 and b > 0]
    if gone and came:
        return f"{gone[0]} → {came[0]}"
    if gone:
        return f"{gone[0]} removed"
    if came:
        return f"{came[0]} added"
    return ""


def env_diff(campaign, meta_a: dict, meta_b: dict) -> list:
    """``[(what, A, B)]`` for every difference between the sides: their definition, the
    recorded environment (meta.json) and the device/software fingerprint."""
    rows = []
    sides = campaign.sides
    a, b = sides["A"], sides["B"]
    for k in sorted(set(a.env) | set(b.env)):
        if a.env.get(k) != b.env.get(k):
            rows.append((f"side env {k}", a.env.get(k, "(unset)"), b.env.get(k, "(unset)")))
    if a.interpreter != b.interpreter:
        rows.append(("python", a.interpreter, b.interpreter))
    if a.args != b.args:
        rows.append(("side arguments", " ".join(a.args), " ".join(b.args)))
    ea, eb = meta_a.get("environment") or {}, meta_b.get("environment") or {}
    for k in sorted(set(ea) | set(eb)):
        if ea.get(k) != eb.get(k) and k not in a.env and k not in b.env:
            rows.append((f"env {k}", ea.get(k, "(unset)"), eb.get(k, "(unset)")))
    fa, fb = meta_a.get("fingerprint") or {}, meta_b.get("fingerprint") or {}
    for k in sorted(set(fa) | set(fb)):
        if str(fa.get(k)) != str(fb.get(k)):
            rows.append((f"fingerprint {k}", str(fa.get(k)), str(fb.get(k))))
    return rows


def unverified(campaign) -> str:
    """Why the sides of ``campaign`` (interpreters, variables, arguments) may not be run here, or ''
    when zlf ab wrote them for this user (the signature ``--resume`` checks): a received campaign's
    campaign.json is data, and profiling would run what it names."""
    try:
        campaign.check_resume({}, where="zlf triage")
    except UsageError as exc:
        return str(exc).split(": ", 1)[-1]
    return ""


def repro_command(campaign, op, side_name: str, shapes_file: Path, dtype: str, write_to: Optional[Path] = None) -> str:
    """One shell line that measures the point alone as the campaign's run of this side did.

    A campaign with run configurations (``_config/<side>.json``): the line is ``zlf run --config
    repro_<side>.json``, that file (the side's configuration for this op, dtype and shape) written
    into ``write_to`` (default: beside ``shapes_file``, where the line names it).
    """
    side = campaign.sides[side_name]
    env = {**side.env, "TRITON_CACHE_DIR": str(Path(campaign.data["triton_cache"]) / side.cache_key())}
    cmd = [side.interpreter, "-m", "zlf", op.command]
    replay = campaign.path / op.name / "r1_A"
    replay = replay if campaign.data.get("replay") and (replay / "autotune_records").is_dir() else None
    if campaign.data.get("configs"):
        name = f"repro_{side_name}.json"
        repro_config(campaign, op, side_name, shapes_file, dtype, replay).write(Path(write_to or shapes_file.parent) / name)
        cmd += ([] if op.command == "run" else [op.run_spec]) + ["--config", str(shapes_file.parent / name)]
        cmd += list(campaign.data.get("run_args") or []) + list(side.args)
    else:  # a campaign of an older zlf: its runs' flags
        cmd += [op.run_spec] + (["--dtype", dtype, "--shapes", str(shapes_file)] if op.command == "run" else [])
        run_args = list(campaign.data.get("run_args") or [])
        if op.command == "run":  # the point's one dtype replaces the campaign's --dtype list
            run_args = [a for i, a in enumerate(run_args) if a != "--dtype" and (i == 0 or run_args[i - 1] != "--dtype")]
        cmd += list(campaign.data.get("extension_args") or []) + run_args + list(side.args)
        if op.command == "run" and "--ext" in cmd and "shapes" not in cmd:
            cmd += ["--ext", "shapes"]
        if replay is not None:
            cmd += ["--replay-from", str(replay)]
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return f"cd {shlex.quote(campaign.data.get('cwd') or '.')} && {prefix} {shlex.join(cmd)}"


def repro_config(campaign, op, side_name: str, shapes_file: Path, dtype: str, replay: Optional[Path]):
    """Side ``side_name``'s run configuration for ``op``'s one point: its dtype, its shape
    (``shapes``) and, where round 1 A recorded one, the autotune record to replay."""
    from .profile import REPLAY_OPTION, SHAPES_OPTION

    config = campaign.config(side_name)
    if op.command != "run":
        return config
    config = config.with_changes(ops=(op.run_spec,), dtypes=(dtype,)).selecting([SHAPES_OPTION[0]])
    values = {SHAPES_OPTION[0]: {SHAPES_OPTION[1]: str(shapes_file)}}
    if replay is not None:
        values[REPLAY_OPTION[0]] = {REPLAY_OPTION[1]: str(replay)}
    return config.with_options(values)


# ----------------------------------------------------------------------------- counters side by side
def _pairs(pa: Optional[Profile], pb: Optional[Profile]) -> list:
    ka = list(pa.kernels) if pa is not None and pa.ok else []
    kb = list(pb.kernels) if pb is not None and pb.ok else []
    return [(ka[i] if i < len(ka) else None, kb[i] if i < len(kb) else None) for i in range(max(len(ka), len(kb)))]


def beyond_noise(key: str, a, b) -> bool:
    """A delta counts when it exceeds the larger of the two sides' spreads over their calls."""
    va, vb = a.mean.get(key), b.mean.get(key)
    if va is None or vb is None or va == vb:
        return False
    noise = max(a.noise.get(key) or 0.0, b.noise.get(key) or 0.0)
    return abs(vb - va) > noise


def _delta(key: str, va, vb) -> str:
    if va is None or vb is None:
        return ""
    if va and key not in ("grid", "block"):
        return f"{vb / va:.3g}×"
    return f"{vb - va:+,.4g}"


def metrics_table(pa: Optional[Profile], pb: Optional[Profile]) -> str:
    blocks = []
    for a, b in _pairs(pa, pb):
        title = f"kernel #{(a or b).index}: A {a.kernel if a else '(none)'} · B {b.kernel if b else '(none)'}"
        rows = []
        for key in ncu.METRIC_KEYS:
            va = a.mean.get(key) if a else None
            vb = b.mean.get(key) if b else None
            na = a.noise.get(key) if a else None
            nb = b.noise.get(key) if b else None
            loud = bool(a and b and beyond_noise(key, a, b))
            delta = _delta(key, va, vb)
            noise = max(na or 0.0, nb or 0.0)
            label = ncu.LABELS[key] + (f" ({ncu.UNITS[key]})" if ncu.UNITS[key] else "")
            rows.append([label, ncu.fmt(key, va), ncu.fmt(key, vb), f"**{delta}**" if loud and delta else delta,
                         ncu.fmt(key, noise) if noise else "0"])
        blocks.append(f"{title}\n\n" + tabulate(rows, headers=["metric", "A", "B", "B vs A", "noise"], tablefmt="github"))
    return "\n\n".join(blocks)


def counter_phrases(pa: Optional[Profile], pb: Optional[Profile]) -> list:
    """Short phrases for the counters that moved beyond noise in the longest kernel."""
    pairs = [(a, b) for a, b in _pairs(pa, pb) if a and b]
    if not pairs:
        return []
    a, b = max(pairs, key=lambda p: p[0].mean.get("duration_us") or 0.0)
    out = []

    def moved(key):
        return beyond_noise(key, a, b)

    ma, mb = a.mean, b.mean
    if moved("duration_us"):
        out.append(f"ncu time {ma['duration_us']:.3g} → {mb['duration_us']:.3g} µs")
    if moved("registers"):
        r = mb["registers"] / ma["registers"] if ma["registers"] else 0
        out.append(f"{r:.2g}× registers" if r >= 1.5 or 0 < r <= 0.67 else f"registers {ma['registers']:.0f} → {mb['registers']:.0f}")
    if moved("occupancy_pct"):
        out.append(f"occupancy {ma['occupancy_pct']:.0f} → {mb['occupancy_pct']:.0f} %")
    if moved("smem_bytes"):
        out.append(f"shared memory {ncu.fmt('smem_bytes', ma['smem_bytes'])} → {ncu.fmt('smem_bytes', mb['smem_bytes'])}")
    if moved("local_bytes"):
        out.append(f"spills {ncu.fmt('local_bytes', ma['local_bytes'])} → {ncu.fmt('local_bytes', mb['local_bytes'])}")
    if moved("instructions") and ma.get("instructions"):
        out.append(f"{mb['instructions'] / ma['instructions']:.2g}× instructions")
    for key, word in (("sm_pct", "SM"), ("dram_pct", "DRAM")):
        if moved(key) and abs(mb[key] - ma[key]) >= 5:
            out.append(f"{word} {ma[key]:.0f} → {mb[key]:.0f} % of peak")
    if moved("grid"):
        out.append(f"grid {ma['grid']:.0f} → {mb['grid']:.0f}")
    return out


# ----------------------------------------------------------------------------- one bundle
def campaign_numbers(stat: dict) -> dict:
    """``delta_pct``, ``a_ms``, ``b_ms`` of a summary.json point as the campaign's table shows them:
    its estimate and the geometric means whose ratio it is (an older summary: the medians)."""
    delta = stat.get("delta_pct") if stat.get("delta_pct") is not None else stat.get("delta_median_pct")
    return {"delta_pct": delta, "a_ms": stat.get("a_mean_ms") or stat.get("a_median_ms"),
            "b_ms": stat.get("b_mean_ms") or stat.get("b_median_ms")}


def triage_point(campaign, stat: dict, session, parent: Path, calls: int = 3, ncu_path: Optional[str] = None,
                 profile: bool = True) -> dict:
    """Write ``parent/<point>/`` (whole, then swapped in); return its bundle.json content."""
    t0 = time.monotonic()
    point_id = stat["point"]
    found = _runs_of_point(campaign, point_id)
    name = folder_name(point_id)
    final = parent / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent))  # fresh: no planted link in it
    bundle = {"point": point_id, "verdict": stat.get("verdict"), **campaign_numbers(stat), "dir": str(final)}
    if found is None:
        bundle["why"] = "no round where both sides ran this point ok"
        write_atomic(tmp / BUNDLE_JSON, json.dumps(redact(bundle), indent=2) + "\n")
        write_atomic(tmp / BUNDLE_MD, redact_text(f"# {point_id}\n\n{bundle['why']}\n"))
        replace_dir(tmp, final)
        return bundle
    op, k, ra, rb, rec_a, rec_b = found
    dir_a, dir_b = campaign.run_dir(ra), campaign.run_dir(rb)
    meta_a, meta_b = RunDir(dir_a).meta(), RunDir(dir_b).meta()
    point = Point(rec_a.op, rec_a.shape, rec_a.dtype, rec_a.variant)
    bundle.update(round=k, run_a=str(dir_a), run_b=str(dir_b))
    write_atomic(tmp / SHAPES, f"{point.op}:\n  shapes:\n  - {list(point.shape)}\n")

    auto = {"A": _autotune_lines(rec_a, dir_a, meta_a), "B": _autotune_lines(rec_b, dir_b, meta_b)}
    ir_rows, changes, ir_why = ir_changes(dir_a, dir_b, point, tmp / "ir")
    ir_key = key_change(changes)
    env_rows = env_diff(campaign, meta_a, meta_b)
    repro = {s: repro_command(campaign, op, s, final / SHAPES, point.dtype, write_to=tmp) for s in ("A", "B")}
    doubt = unverified(campaign)
    if doubt:  # shown, never run: a received campaign.json's command lines are its author's
        repro = {s: f"# not verified ({doubt}): read it before running it\n{line}" for s, line in repro.items()}

    profiles, why_no_counters = {}, ""
    if op.command != "run":
        why_no_counters = f"no counters: a zlf {op.command} point is not profiled (zlf profile runs zlf run points)"
    elif not profile:
        why_no_counters = "no counters: --no-profile"
    elif ncu.find_ncu(ncu_path) is None:
        why_no_counters = NO_PROFILER
    elif doubt:
        why_no_counters = f"no counters: {doubt}"
    else:
        for side, run_dir, rec, meta in (("A", dir_a, rec_a, meta_a), ("B", dir_b, rec_b, meta_b)):
            s = campaign.sides[side]
            target = Target(point, op.run_spec, Path(run_dir), rec, meta)
            profiles[side] = profile_point(target, tmp, session, calls=calls, ncu_path=ncu_path, python=s.interpreter,
                                           extra_env=dict(s.env), folder=f"profile_{side}",
                                           shown_as=final / f"profile_{side}", cwd=campaign.data.get("cwd"))
        bad = [f"{s}: {p.why}" for s, p in profiles.items() if not p.ok]
        if bad:
            why_no_counters = "; ".join(bad)
    pa, pb = profiles.get("A"), profiles.get("B")
    phrases = counter_phrases(pa, pb)
    if ir_key:
        phrases.append(ir_key)
    bundle.update(autotune=auto, ir_key_change=ir_key, ir_rows=ir_rows, env=[list(r) for r in env_rows], repro=repro,
                  counters=why_no_counters or "ok", summary=", ".join(phrases), seconds=round(time.monotonic() - t0, 2))
    write_atomic(tmp / BUNDLE_MD, redact_text(render_bundle(bundle, pa, pb, ir_why)))
    write_atomic(tmp / BUNDLE_JSON, json.dumps(redact(bundle), indent=2, default=str) + "\n")
    replace_dir(tmp, final)
    return bundle


def render_bundle(b: dict, pa, pb, ir_why: str) -> str:
    delta = f"{b['delta_pct']:+.1f} %" if b.get("delta_pct") is not None else "?"
    out = [f"# {b['point']}: {b.get('verdict') or '?'} ({delta}, B against A)", "",
           f"A {_ms(b.get('a_ms'))}, B {_ms(b.get('b_ms'))} (the campaign's gmean_ms_A/B: geometric means over the "
           "rounds its estimate keeps, whose ratio is the delta); "
           f"evidence below from round {b['round']} (A: `{b['run_a']}`, B: `{b['run_b']}`).", ""]
    if b.get("summary"):
        out += [f"**B: {b['summary']}**", ""]
    out += ["## Autotune choice", ""]
    for side in ("A", "B"):
        out += [f"- {side}: {line}" for line in b["autotune"][side]]
    out += ["", "## IR diff (ir_dump)", ""]
    if b["ir_rows"]:
        out.append(md_table(b["ir_rows"], ["kernel", "status", "file", "op counts A→B"]))
        out += ["", "Unified diffs: `ir/<kernel>/<file>.diff` (source locations ignored)."]
    else:
        out.append(ir_why)
    out += ["", "## Counters (Nsight Compute)", ""]
    if b["counters"] != "ok":
        out.append(b["counters"])
    if (pa and pa.ok) or (pb and pb.ok):
        out += [f"{max(p.calls for p in (pa, pb) if p)} profiled calls per side, each side in its own process with its "
                "own environment and the campaign's autotune record. Noise = the larger spread (max − min) of a metric "
                "over one side's calls; **bold**: the delta exceeds it. Details: `profile_A/`, `profile_B/`.", "",
                metrics_table(pa, pb)]
        for side, p in (("A", pa), ("B", pb)):
            if p is not None:
                out += [f"- {side} launches: {p.launches}"] + [f"- {side}: {n}" for n in p.notes]
    out += ["", "## Environment diff", ""]
    if b["env"]:
        out.append(md_table(b["env"], ["what", "A", "B"]))
    else:
        out.append("none recorded besides the side definitions")
    out += ["", "## Reproduce one side alone", ""]
    for side in ("A", "B"):
        out += [f"{side}:", "", "```sh", b["repro"][side], "```", ""]
    return "\n".join(out)


def _ms(v) -> str:
    return f"{v:.4g} ms" if isinstance(v, (int, float)) else "?"


# ----------------------------------------------------------------------------- the index
def index_line(b: dict) -> str:
    delta = f"{b['delta_pct']:+.1f} %" if b.get("delta_pct") is not None else "?"
    rel = Path(b["dir"]).name
    what = b.get("summary") or b.get("why") or (b.get("counters") if b.get("counters") != "ok" else "") or "no change found in config, IR or counters"
    return f"- [{b['point']}]({rel}/{BUNDLE_MD}) {b.get('verdict') or '?'} {delta} — B: {what}"


def write_index(parent: Path, seconds_per_point: Optional[float] = None) -> str:
    bundles = []
    for f in sorted(parent.glob(f"*/{BUNDLE_JSON}")):
        try:
            bundles.append(readers.read_json(f, schema=BUNDLE_SCHEMA, what=BUNDLE_JSON))
        except (OSError, UsageError):
            continue
    slower = sorted((b for b in bundles if b.get("verdict") == "SLOWER"), key=lambda b: -(b.get("delta_pct") or 0))
    faster = sorted((b for b in bundles if b.get("verdict") == "FASTER"), key=lambda b: b.get("delta_pct") or 0)
    other = sorted((b for b in bundles if b.get("verdict") not in DECIDED), key=lambda b: -abs(b.get("delta_pct") or 0))
    out = ["# Triage", ""]
    for title, group in (("Regressions (SLOWER), largest first", slower), ("Improvements (FASTER)", faster),
                         ("Other points", other)):
        if group:
            out += [f"## {title}", ""] + [index_line(b) for b in group] + [""]
    if not bundles:
        out += ["No point was decided FASTER or SLOWER: nothing to triage.", ""]
    counters = sorted({b["counters"] for b in bundles if b.get("counters") not in (None, "ok")})
    out += [f"Without counters: {c}" for c in counters]
    if seconds_per_point is not None:
        out.append(f"Triage took {seconds_per_point:.1f} s per point (after the campaign; no timing run was disturbed).")
    text = "\n".join(out).rstrip() + "\n"
    write_atomic(parent / INDEX, redact_text(text))
    return text


# ----------------------------------------------------------------------------- entry points
def run_triage(campaign, stats: list, session, points=None, calls: int = 3, ncu_path: Optional[str] = None,
               profile: bool = True, out: Optional[str] = None) -> str:
    """Write a triage bundle per chosen point under ``out/triage`` (``out``: the campaign
    directory when None); return the index text."""
    by_point = {s["point"]: s for s in stats}
    if points:
        unknown = [p for p in points if p not in by_point]
        if unknown:
            raise UsageError(f"point {unknown[0]!r} is not in the campaign's summary (points: "
                             f"{', '.join(list(by_point)[:4]) or 'none'}{' ...' if len(by_point) > 4 else ''})")
        chosen = [by_point[p] for p in points]
    else:
        chosen = [s for s in stats if s.get("verdict") in DECIDED]
    where = Path(out) if out else campaign.path
    parent = ensure_dir(where / TRIAGE_DIR, where)  # a ``triage`` link is refused
    t0 = time.monotonic()
    for i, stat in enumerate(chosen, 1):
        print(f"[triage {i}/{len(chosen)}] {stat['point']} ({stat.get('verdict')})", file=sys.stderr, flush=True)
        triage_point(campaign, stat, session, parent, calls=calls, ncu_path=ncu_path, profile=profile)
    per_point = (time.monotonic() - t0) / len(chosen) if chosen else None
    text = write_index(parent, per_point)
    return text


def after_campaign(campaign, results, options, session) -> None:
    """``--triage``: a bundle per decided point; ``options``: :class:`zlf.ab.CampaignOptions`."""
    if campaign.data.get("aa"):
        print("triage: an A/A campaign has no change to explain; skipped", file=sys.stderr)
        return
    stats = [r.to_json() if hasattr(r, "to_json") else dict(r) for r in results]
    text = run_triage(campaign, stats, session, calls=max(1, options.campaign.get("triage_calls") or 3))
    print(text)
    print(f"triage dir: {campaign.path / TRIAGE_DIR}")


def main(args, session) -> int:
    from zlf.ab import SUMMARY_JSON, Campaign

    campaign = Campaign.open(os.path.abspath(args.campaign))
    summary = campaign.path / SUMMARY_JSON
    if not summary.is_file():
        raise UsageError(f"{args.campaign!r} has no {SUMMARY_JSON}: finish the campaign first (zlf ab --resume {args.campaign})")
    stats = readers.read_json(summary, schema="summary", what=SUMMARY_JSON).get("points") or []
    text = run_triage(campaign, stats, session, args.points, calls=args.calls, ncu_path=args.ncu,
                      profile=not args.no_profile, out=args.out)
    print(text)
    print(f"triage dir: {Path(args.out or campaign.path) / TRIAGE_DIR}")
    return 0
