"""Find the first commit that made the chosen points slower: each step a zlf ab campaign against the known-good side.

Two kinds of search:

- **ops from a repository** (``--repo DIR``, the default: the current folder): the ops are files
  of the repository (``path/ops.py::op_name`` relative to its top). Side A runs them as they are
  at ``--good``, side B as they are at the commit under test.
- **the compiler** (``--build CMD --python PATH --good-python PATH``, or ``--python-template``): at
  each commit of ``--repo`` (the compiler's checkout) ``CMD`` builds and installs it into the
  interpreter ``PATH`` (side B); side A is the prepared interpreter of the good revision. With
  ``--python-template '/envs/{rev}/bin/python'`` each revision has an interpreter prepared already.

Every step is a zlf ab campaign (adaptive by default) of B = the commit against A = good. A commit
whose ops do not import, or whose build fails, is skipped as ``git bisect skip`` does. A step whose
points are UNSURE after the campaign's maximum rounds is skipped too (named as such). The error
rate: each step's campaign holds its family-wise error at ``--alpha`` / (the steps the search can
take); the search as a whole is wrong with probability at most the sum over the steps it ran
(Bonferroni), which the result states.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Optional

from zlf import readers
from zlf.console import clean
from zlf.errors import UsageError
from zlf.options import Number, add_backend_argument
from zlf.redact import redact_argv
from zlf.rundir import safe_name, timestamp, write_atomic
from zlf.trust import SIGNATURE, seal, sealed_by_me

STATE = "bisect.json"
FORMAT = 1
GOOD, BAD, SKIP, UNSURE = "good", "bad", "skip", "unsure"
#: the variable a shim op file reads to find the revision's tree
TREE_VAR = "ZLF_BISECT_TREE"
MAX_STATE_BYTES = 16 << 20
_HASH = {"type": "string", "pattern": "^([0-9a-f]{40}|[0-9a-f]{64})$"}
#: what --resume accepts of a bisect.json: the fields it reads, of the types it reads them as
STATE_SCHEMA = {
    "type": "object",
    "required": ["format", "repo", "good", "bad", "commits", "steps", "ops", "mode", "alpha_step"],
    "properties": {
        "format": {"type": "integer"}, "repo": {"type": "string"}, "good": _HASH, "bad": _HASH,
        "commits": {"type": "array", "items": _HASH, "minItems": 1},
        "steps": {"type": "array", "items": {"type": "object", "required": ["commit", "outcome"],
                                             "properties": {"commit": _HASH, "outcome": {"enum": [
                                                 "good", "bad", "skip", "unsure"]}}}},
        "ops": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "mode": {"enum": ["repo", "compiler"]},
        "alpha_step": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
        "direction": {"enum": ["slower", "faster"]},
        "rounds": {"type": ["integer", "null"], "minimum": 2, "maximum": 100},
        "max_rounds": {"type": "integer", "minimum": 2, "maximum": 100},
        "min_effect": {"type": ["number", "null"]},
        "points": {"type": "array", "items": {"type": "string"}},
        "ab_args": {"type": "array", "items": {"type": "string"}},
        "backend": {"type": ["string", "null"]},
        "build": {"type": ["string", "null"]}, "python": {"type": ["string", "null"]},
        "good_python": {"type": ["string", "null"]}, "python_template": {"type": ["string", "null"]},
    },
}

EPILOG = """\
examples:
  zlf bisect ops/my_ops.py::relu_op --good v1.0 --bad main            ops from this repository
  zlf bisect gems_ops.py::mm --repo ~/FlagGems --good v5.3.3 --bad v5.3.4 --rounds 6
  zlf bisect matmul --repo ~/triton --good abc123 --bad def456 \\
      --build 'pip install --no-build-isolation -e python' --python venvB/bin/python --good-python venvA/bin/python
  zlf bisect matmul --repo ~/triton --good abc123 --bad def456 --python-template '/envs/{rev}/bin/python'
  zlf bisect --resume runs/bisect_relu_20261205-101500                 go on after an interruption
exit codes: 0 the first bad commit was found; 1 the search ended without one (bad is not slower
than good, or only skipped commits remain); 2 bad input."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ops", nargs="*", metavar="OP",
                        help="ops to A/B at each step: PATH::NAME relative to the repository's top (ops from a "
                             "repository), or as zlf ab takes them (compiler search)")
    parser.add_argument("--good", metavar="REV", help="a revision known to be good (side A of every step)")
    parser.add_argument("--bad", metavar="REV", help="a revision known to be slower (checked first)")
    parser.add_argument("--repo", default=".", metavar="DIR", help="the git repository searched (default: .)")
    c = parser.add_argument_group("compiler search (the repository is the compiler's)")
    c.add_argument("--build", metavar="CMD",
                   help="shell command run in each revision's tree to build and install it into --python")
    c.add_argument("--python", metavar="PATH", help="side B's interpreter, which --build installs into")
    c.add_argument("--good-python", metavar="PATH", help="side A's interpreter: the good revision, prepared")
    c.add_argument("--python-template", metavar="TEMPLATE",
                   help="an interpreter per revision, e.g. '/envs/{rev}/bin/python' ({rev}: the full hash, "
                        "{short}: 12 characters)")
    s = parser.add_argument_group("each step's campaign")
    s.add_argument("--rounds", type=Number(int, 2, 100), metavar="N",
                   help="fixed rounds per step (default: adaptive, --until-confident up to --max-rounds)")
    s.add_argument("--max-rounds", type=Number(int, 2, 100), default=10, metavar="M", help="adaptive steps stop here (default 10)")
    s.add_argument("--alpha", type=Number(float, 0, 0.5, low_open=True, high_open=True), default=0.05, metavar="A",
                   help="error rate of the whole search (default 0.05), split over its steps")
    s.add_argument("--min-effect", type=Number(float, 0, 1000, low_open=True, unit="percent"), default=None, metavar="PCT",
                   help="smallest change that counts (zlf ab's --min-effect; default: zlf ab's)")
    s.add_argument("--direction", choices=("slower", "faster"), default="slower",
                   help="what 'bad' means: SLOWER (default) or FASTER than good")
    s.add_argument("--point", action="append", default=[], metavar="ID",
                   help="decide on these points only (repeatable; default: every point of the ops)")
    add_backend_argument(s, help="passed to every campaign")
    s.add_argument("--ab-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for every zlf ab campaign (repeatable), e.g. --ab-arg=--dtype=float16")
    o = parser.add_argument_group("output")
    o.add_argument("--out", default="runs", metavar="PARENT", help="parent of the bisect folder (default: runs/)")
    o.add_argument("--name", metavar="LABEL", help="bisect folder label (default: the first op)")
    o.add_argument("--resume", metavar="DIR", help="go on with an interrupted search (give --build again if it had one)")
    o.add_argument("--format", choices=("table", "json"), default="table", help="how the result is printed")



# ----------------------------------------------------------------------------- git
def git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UsageError("git is not installed") from None
    if done.returncode != 0:
        first = (done.stderr or done.stdout).strip().splitlines()
        raise UsageError(f"git {args[0]}: {first[0] if first else 'failed'}")
    return done.stdout


def resolve(repo: Path, rev: str, what: str) -> str:
    if not rev or rev.startswith("-") or any(c.isspace() or ord(c) < 32 for c in rev):
        raise UsageError(f"{what} {rev!r}: not a revision")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
    except UsageError:
        raise UsageError(f"{what} {rev!r}: no such commit in {repo}") from None


def commits_between(repo: Path, good: str, bad: str) -> list:
    """The commits after ``good`` up to ``bad`` (included), oldest first."""
    try:
        git(repo, "merge-base", "--is-ancestor", good, bad)
    except UsageError:
        raise UsageError("--good is not an ancestor of --bad: give a good revision older than the bad one") from None
    return git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}").split()


def extract(repo: Path, sha: str, dest: Path) -> Path:
    """The tree of ``sha`` as plain files under ``dest`` (the repository itself is not touched)."""
    if dest.is_dir():
        return dest
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha], capture_output=True, check=False)
    if data.returncode != 0:
        raise UsageError(f"git archive {sha[:12]}: {data.stderr.decode(errors='replace').strip()[:200]}")
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")  # no absolute paths, no links out, no devices
        else:  # Python before 3.9.17/3.10.12/3.11.4: refuse what the data filter would
            for m in tar.getmembers():
                target = (tmp / m.name).resolve()
                if tmp.resolve() not in target.parents or m.issym() or m.islnk() or m.isdev():
                    raise UsageError(f"revision {sha[:12]}: refusing archive member {m.name!r}")
            tar.extractall(tmp)
    os.replace(tmp, dest)
    return dest


# ----------------------------------------------------------------------------- state
class Search:
    """The search's state, kept in ``bisect.json`` after every step."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    def save(self) -> None:
        # its fields become command lines (the ops, the interpreters, the build): signed with this
        # user's key, as a campaign is, so that --resume runs only what this user's zlf wrote
        write_atomic(self.path / STATE, json.dumps(seal(self.data), indent=1, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> "Search":
        f = path / STATE
        if not f.is_file():
            raise UsageError(f"--resume {path}: no {STATE} (not a zlf bisect folder)")
        data = readers.read_json(f, schema=STATE_SCHEMA, limit=MAX_STATE_BYTES, what=STATE)
        if not sealed_by_me(data):
            raise UsageError(f"--resume {path}: {STATE}'s repository, ops, interpreters and build are not what zlf "
                             "bisect wrote for this user (edited, or made by another user or machine): refusing "
                             "to run them; start a new search")
        data.pop(SIGNATURE, None)
        if data["format"] != FORMAT:
            raise UsageError(f"--resume {path}: {STATE} format {data['format']} is not {FORMAT}")
        return cls(path, data)

    @property
    def steps(self) -> list:
        return self.data["steps"]

    def outcome(self, sha: str) -> Optional[str]:
        for s in self.steps:
            if s["commit"] == sha:
                return s["outcome"]
        return None


def bounds(search: Search) -> tuple:
    """``(lo, hi)``: the index of the last known-good commit (-1: ``--good``) and of the first
    known-bad one in ``commits``."""
    commits = search.data["commits"]
    lo, hi = -1, None
    for i, sha in enumerate(commits):
        o = search.outcome(sha)
        if o == BAD and hi is None:
            hi = i
    if hi is None:
        return lo, None
    for i in range(hi):
        if search.outcome(commits[i]) == GOOD:
            lo = i
    return lo, hi


def next_commit(search: Search) -> Optional[int]:
    """The next index to test: the bad end first, then the middle of the open range, stepping
    away from the middle past skipped commits (as git bisect does)."""
    commits = search.data["commits"]
    last = len(commits) - 1
    if search.outcome(commits[last]) is None:
        return last
    lo, hi = bounds(search)
    if hi is None:
        return None
    mid = (lo + hi) // 2
    order = sorted(range(lo + 1, hi), key=lambda i: (abs(i - mid), i))
    for i in order:
        if search.outcome(commits[i]) is None:
            return i
    return None


# ----------------------------------------------------------------------------- a step
SHIM = '''"""Written by zlf bisect: the ops of {rel} at the revision ${var} names (a folder of its files)."""
import os
import runpy
import sys

_file = os.path.join(os.environ[{var!r}], {rel!r})
sys.path.insert(0, os.path.dirname(_file))
globals().update({{k: v for k, v in runpy.run_path(_file).items() if not k.startswith("__")}})
'''


def repo_ops(search: Search) -> list:
    """The campaign's OP arguments for ops from the repository: one shim file per op file."""
    specs = []
    for i, spec in enumerate(search.data["ops"]):
        rel, sep, name = spec.partition("::")
        shim = search.path / "ops" / f"{i}_{safe_name(Path(rel).stem)}.py"
        if not shim.exists():
            shim.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(shim, SHIM.format(rel=rel, var=TREE_VAR))
        specs.append(f"{shim}::{name}" if sep else str(shim))
    return specs


def import_check(python: str, tree: Path, rel_files: list, env: dict) -> str:
    """'' when every op file of ``tree`` imports; else the first error line."""
    for rel in rel_files:
        code = ("import runpy, sys, os; f=sys.argv[1]; sys.path.insert(0, os.path.dirname(f)); runpy.run_path(f)")
        done = subprocess.run([python, "-c", code, str(tree / rel)], capture_output=True, text=True, env=env,
                              cwd=str(tree), check=False, timeout=600)
        if done.returncode != 0:
            lines = [ln for ln in (done.stderr or "").strip().splitlines() if ln.strip()]
            return f"{rel} does not import: {lines[-1][:200] if lines else f'exit code {done.returncode}'}"
    return ""


def sides_for(search: Search, sha: str, log) -> tuple:
    """``(ab arguments that define A and B, skip reason or '')`` for the commit under test."""
    d = search.data
    repo = Path(d["repo"])
    if d["mode"] == "repo":
        good_tree = extract(repo, d["good"], search.path / "trees" / d["good"][:12])
        tree = extract(repo, sha, search.path / "trees" / sha[:12])
        env = dict(os.environ)
        why = import_check(sys.executable, tree, sorted({o.partition("::")[0] for o in d["ops"]}), env)
        if why:
            return [], why
        return ["--a-env", f"{TREE_VAR}={good_tree}", "--b-env", f"{TREE_VAR}={tree}"], ""
    if d.get("python_template"):
        a = d["python_template"].format(rev=d["good"], short=d["good"][:12])
        b = d["python_template"].format(rev=sha, short=sha[:12])
        for which, py in (("good", a), ("tested", b)):
            if not os.access(py, os.X_OK):
                if which == "good":
                    raise UsageError(f"--python-template: the good revision's interpreter {py} is not executable")
                return [], f"no interpreter {py} for this revision"
        return ["--a-python", a, "--b-python", b], ""
    tree = extract(repo, sha, search.path / "trees" / sha[:12])
    env = dict(os.environ, ZLF_BISECT_REV=sha, ZLF_BISECT_PYTHON=d["python"])
    with open(log, "a") as f:
        f.write(f"$ {d['build']}  # in {tree}\n")
        f.flush()
        done = subprocess.run(d["build"], shell=True, cwd=str(tree), env=env, stdout=f, stderr=subprocess.STDOUT,
                              check=False)
    if done.returncode != 0:
        return [], f"build failed (exit code {done.returncode}; {log})"
    probe = subprocess.run([d["python"], "-c", "import zlf"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return [], f"the built interpreter does not import zlf: {(probe.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    return ["--a-python", d["good_python"], "--b-python", d["python"]], ""


def classify(summary: dict, points: list, direction: str, fixed_rounds: bool = False) -> tuple:
    """``(outcome, details)`` of a finished campaign's summary.json."""
    want = "SLOWER" if direction == "slower" else "FASTER"
    other = "FASTER" if want == "SLOWER" else "SLOWER"
    rows = [p for p in summary.get("points") or [] if isinstance(p, dict) and isinstance(p.get("point"), str)]
    if points:
        rows = [p for p in rows if p["point"] in points]
    if not rows:
        failed = summary.get("failed_ops") or summary.get("incomplete_ops") or {}
        return SKIP, {"why": f"no verdict ({'; '.join(f'{k}: {v}' for k, v in dict(failed).items())[:300] or 'no point'})",
                      "points": []}
    verdicts = [{"point": p["point"], "verdict": p.get("verdict"), "delta_pct": p.get("delta_pct"),
                 "delta_lo_pct": p.get("delta_lo_pct"), "delta_hi_pct": p.get("delta_hi_pct"),
                 "mde_pct": p.get("mde_pct")} for p in rows]
    got = {v["verdict"] for v in verdicts}
    details = {"points": verdicts}
    if want in got and other in got:
        details["disagree"] = sorted(v["point"] for v in verdicts if v["verdict"] == other)
    if want in got:
        return BAD, details
    if got <= {"SAME", other}:
        if other in got:
            details["disagree"] = sorted(v["point"] for v in verdicts if v["verdict"] == other)
        return GOOD, details
    details["why"] = "UNSURE after the campaign's rounds: raise " + ("--rounds" if fixed_rounds else "--max-rounds") \
        + " to decide it"
    return UNSURE, details


def run_step(search: Search, index: int, printer) -> dict:
    d = search.data
    sha = d["commits"][index]
    k = len(search.steps) + 1
    step_dir = search.path / "steps" / f"{k:02d}_{sha[:12]}"
    step_dir.mkdir(parents=True, exist_ok=True)
    log = step_dir / "step.log"
    step = {"commit": sha, "index": index, "dir": str(step_dir.relative_to(search.path)), "outcome": None}
    side_args, why = sides_for(search, sha, log)
    if why:
        step.update(outcome=SKIP, why=why)
        return step
    ops = repo_ops(search) if d["mode"] == "repo" else list(d["ops"])
    cmd = [sys.executable, "-m", "zlf", "ab", *ops, *side_args, "--alpha", f"{d['alpha_step']:.6g}",
           "--out", str(step_dir), "--name", f"bisect_{sha[:12]}"]
    cmd += ["--rounds", str(d["rounds"])] if d.get("rounds") else ["--until-confident", "--max-rounds", str(d["max_rounds"])]
    if d.get("min_effect") is not None:
        cmd += ["--min-effect", f"{d['min_effect']:g}"]
    if d.get("backend"):
        cmd += ["--backend", d["backend"]]
    cmd += list(d.get("ab_args") or [])
    step["command"] = redact_argv(cmd)
    printer(f"step {k}: commit {sha[:12]} ({index + 1} of {len(d['commits'])}) ...")
    with open(log, "a") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False, env=dict(os.environ, ZLF_NO_PROGRESS="1"))
    step["rc"] = done.returncode
    campaigns = sorted(p for p in step_dir.glob("ab_*") if (p / "campaign.json").is_file())
    summary_file = campaigns[-1] / "summary.json" if campaigns else None
    if done.returncode == 2 or summary_file is None or not summary_file.is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        if done.returncode == 2:
            raise UsageError(f"zlf ab refused the step's campaign: {tail[0][:300] if tail else 'exit code 2'} ({log})")
        step.update(outcome=SKIP, why=f"the campaign ended without a summary (exit code {done.returncode}; {log})")
        return step
    step["campaign"] = str(campaigns[-1].relative_to(search.path))
    try:
        summary = json.loads(summary_file.read_bytes())
    except ValueError:
        summary = {}
    outcome, details = classify(summary if isinstance(summary, dict) else {}, d.get("points") or [], d["direction"],
                                fixed_rounds=bool(d.get("rounds")))
    failed = (summary.get("failed_ops") or {}) if isinstance(summary, dict) else {}
    if failed and outcome != BAD:
        outcome, details["why"] = SKIP, f"runs failed: {'; '.join(f'{k}: {v}' for k, v in failed.items())[:300]}"
    step.update(outcome=outcome, **details)
    return step


# ----------------------------------------------------------------------------- the command
def _new(args) -> Search:
    if not args.ops:
        raise UsageError("name the ops to A/B at each step (OP ...)")
    if not args.good or not args.bad:
        raise UsageError("--good REV and --bad REV are both needed (or --resume DIR)")
    repo_arg = Path(args.repo)
    if not repo_arg.is_dir():
        raise UsageError(f"--repo {args.repo}: not a folder")
    repo = Path(git(repo_arg, "rev-parse", "--show-toplevel").strip())
    compiler = bool(args.build or args.python_template)
    if args.build and args.python_template:
        raise UsageError("--build and --python-template are two ways to get interpreters: give one")
    if args.build and not (args.python and args.good_python):
        raise UsageError("--build needs --python PATH (side B, built into) and --good-python PATH (side A)")
    if (args.python or args.good_python) and not args.build:
        raise UsageError("--python/--good-python go with --build")
    if not compiler:
        for spec in args.ops:
            rel = spec.partition("::")[0]
            if os.path.isabs(rel) or ".." in Path(rel).parts:
                raise UsageError(f"op {spec!r}: name the op file relative to the repository's top")
    good, bad = resolve(repo, args.good, "--good"), resolve(repo, args.bad, "--bad")
    if good == bad:
        raise UsageError("--good and --bad are the same commit")
    commits = commits_between(repo, good, bad)
    if not commits:
        raise UsageError("no commit between --good and --bad")
    steps_max = 1 + math.ceil(math.log2(len(commits) + 1)) + 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    label = safe_name(args.name or Path(args.ops[0].partition("::")[-1] or args.ops[0]).name, "bisect")
    path = out / f"bisect_{label}_{timestamp()}"
    k = 0
    while True:
        try:
            path.mkdir()
            break
        except FileExistsError:
            k += 1
            path = out / f"bisect_{label}_{timestamp()}-{k}"
    data = {"format": FORMAT, "repo": str(repo), "good": good, "bad": bad, "commits": commits, "steps": [],
            "ops": list(args.ops), "mode": "compiler" if compiler else "repo", "direction": args.direction,
            "points": list(args.point), "rounds": args.rounds, "max_rounds": args.max_rounds,
            "alpha": args.alpha, "steps_max": steps_max, "alpha_step": args.alpha / steps_max,
            "min_effect": args.min_effect, "backend": args.backend, "ab_args": list(args.ab_arg),
            "build": args.build, "python": os.path.abspath(args.python) if args.python else None,
            "good_python": os.path.abspath(args.good_python) if args.good_python else None,
            "python_template": args.python_template, "status": "running", "command": redact_argv(sys.argv)}
    search = Search(path, data)
    search.save()
    return search


def _resume(args) -> Search:
    search = Search.load(Path(args.resume))
    d = search.data
    # a command is never read from a file: the build command must come from this command line
    if d.get("build") and args.build != d["build"]:
        raise UsageError("--resume: this search builds each revision; give its --build command again, unchanged "
                         f"({shlex.quote(d['build'])})")
    if args.build and not d.get("build"):
        raise UsageError("--resume: this search has no --build")
    for key in ("python", "good_python", "python_template"):
        if d.get(key) is not None and not isinstance(d.get(key), str):
            raise UsageError(f"--resume: {STATE}'s {key} is not a path")
    if d.get("python_template") and args.python_template != d["python_template"]:
        raise UsageError("--resume: give --python-template again, unchanged (commands are never read from files)")
    return search


def result(search: Search) -> dict:
    d = search.data
    commits = d["commits"]
    lo, hi = bounds(search)
    skipped = [s for s in search.steps if s["outcome"] in (SKIP, UNSURE)]
    disagree = sorted({p for s in search.steps for p in s.get("disagree", [])})
    # a step spends its share of alpha only when its campaign could decide (good or bad); a skipped
    # commit whose ops did not import ran no test
    decided = sum(1 for s in search.steps if s["outcome"] in (GOOD, BAD))
    out = {"good": d["good"], "bad": d["bad"], "commits": len(commits), "steps": len(search.steps),
           "alpha_step": d["alpha_step"], "decided_steps": decided,
           "error_bound": min(1.0, d["alpha_step"] * decided),
           "skipped": [s["commit"] for s in skipped], "points_disagree": disagree}
    if hi is None:
        bad_step = next((s for s in search.steps if s["commit"] == commits[-1]), None)
        out["first_bad"] = None
        out["why"] = ("--bad is not " + d["direction"] + " than --good at the chosen points: nothing to bisect"
                      if bad_step and bad_step["outcome"] == GOOD else
                      "--bad could not be judged (" + (bad_step or {}).get("why", "no step") + ")")
        return out
    between = [commits[i] for i in range(lo + 1, hi)]
    if between:  # only skipped commits are left between the last good and the first bad
        out["first_bad"] = None
        out["candidates"] = between + [commits[hi]]
        out["why"] = "the first bad commit is one of these (the others could not be tested)"
    else:
        out["first_bad"] = commits[hi]
        out["subject"] = git(Path(d["repo"]), "log", "-1", "--format=%s", commits[hi]).strip()[:200]
    return out


def _print(search: Search, res: dict, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps({"result": res, "steps": search.steps}, indent=1, default=str))
        return
    from tabulate import tabulate

    rows = []
    for k, s in enumerate(search.steps, 1):
        pts = s.get("points") or []
        shown = "; ".join(f"{p['point']} {p['verdict']}"
                          + (f" {p['delta_pct']:+.1f}% [{p['delta_lo_pct']:+.1f}, {p['delta_hi_pct']:+.1f}]"
                             if isinstance(p.get("delta_pct"), (int, float)) and isinstance(p.get("delta_lo_pct"), (int, float))
                             and isinstance(p.get("delta_hi_pct"), (int, float)) else "")
                          for p in pts[:3]) + (f"; +{len(pts) - 3} more" if len(pts) > 3 else "")
        rows.append([k, s["commit"][:12], s["outcome"], clean(shown or s.get("why", ""))])
    print(tabulate(rows, headers=["step", "commit", "outcome", "verdicts (B = commit vs A = good)"]))
    print()
    if res.get("first_bad"):
        print(f"first bad commit: {res['first_bad']} {clean(res.get('subject', ''))}")
    elif res.get("candidates"):
        print(f"{res['why']}: {', '.join(c[:12] for c in res['candidates'])}")
    else:
        print(f"no first bad commit: {clean(res['why'])}")
    if res["skipped"]:
        print(f"skipped: {', '.join(c[:12] for c in res['skipped'])}")
    if res["points_disagree"]:
        print(f"points disagree: {', '.join(res['points_disagree'])} moved the other way at some step")
    print(f"error rate: each step's campaign at alpha {res['alpha_step']:.3g}; the whole search is wrong with "
          f"probability at most {res['error_bound']:.3g} ({res['decided_steps']} steps decided by a campaign, "
          f"of {res['steps']}; Bonferroni)")
    print(f"bisect dir: {clean(search.path)}")


def main(args, session) -> int:
    search = _resume(args) if args.resume else _new(args)
    printer = (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        while True:
            index = next_commit(search)
            if index is None:
                break
            step = run_step(search, index, printer)
            search.steps.append(step)
            search.save()
            printer(f"  -> {step['outcome']}" + (f": {step['why']}" if step.get("why") else ""))
            if index == len(search.data["commits"]) - 1 and step["outcome"] != BAD:
                break  # bad is not bad: nothing to search
    except KeyboardInterrupt:
        search.data["status"] = "interrupted"
        search.save()
        print(f"interrupted; go on with: zlf bisect --resume {search.path}", file=sys.stderr)
        return 130
    res = result(search)
    search.data["status"] = "complete"
    search.data["result"] = res
    search.save()
    _print(search, res, args.format)
    return 0 if res.get("first_bad") else 1
