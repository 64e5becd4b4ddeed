"""The state of one ``zlf ab`` campaign: campaign.json, its sides, ops and runs, the grouping of
runs into processes, and the trust checks of ``--resume``.

A campaign with ``"process": "shared"`` runs every op of a (round, side) in one process (startup
paid once); an op that fails or crashes there gets its round re-run in per-op processes
(``"alone"``), so a report never rests on a shared process that misbehaved. How a run is started
and filed is in :mod:`zlf.ab.execute`; what an extension adds to a run is a
:class:`~zlf.ab.extending.RunNeed` (``campaign_run_needs``).
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import attrs

from .. import __version__
from .. import controls as ctl
from .. import readers, stats
from ..errors import UsageError
from ..redact import redact
from ..rundir import RESULTS, RunDir, write_atomic
from .execute import Execution
from .layout import (CONFIGS, C_RUNNING, CAMPAIGN, FAILED, FORMAT_VERSION, LOGS, OK, PENDING, RUNNING, SHARED,
                     SHARED_PROCESS, SKIPPED, STAGING, now)

#: campaign.json fields that become the runs' command lines, environment or code: signed at
#: creation with this user's key, so that ``--resume`` runs nothing an edit put there.
#: (``scale`` too: a Ray address is where results are unpickled from.)
SIGNED = ("sides", "ops", "run_args", "extension_args", "cwd", "triton_cache", "scale", "identities")
#: campaign.json fields that decide the verdicts as the campaign goes (the screen's cleared and
#: frozen points, the looks, the settings of the statistics and of the library): signed again at
#: every save with the same key (``state_mac``), so that an edit cannot forge a verdict.
STATE = ("screening", "statistics", "library", "looks", "frozen", "metric")
#: campaign.json fields a table is read from beside :data:`STATE` (which run of which side and round
#: is where, and whether the campaign finished): signed at every save too (``record_mac``), and
#: checked by the readers that show verdicts (``--status``, ``zlf report``), not by ``--resume``,
#: which re-runs what is not filed ok whatever these fields say.
RECORD = ("runs", "status")
KEY_FILE = "campaign.key"


@attrs.frozen
class Side:
    """One side of the campaign: the interpreter, the environment and the extra arguments
    (``--candidate FILE`` of a task campaign) its runs get."""

    name: str  # "A" or "B"
    env: dict = attrs.field(factory=dict)
    python: str = ""
    args: tuple = attrs.field(default=(), converter=tuple)

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def cache_key(self) -> str:
        """Short hash of the side's definition: runs share a Triton cache only with runs of
        the same side letter and the same definition (safe to reuse across campaigns)."""
        definition = {"python": self.interpreter, "env": self.env}
        if self.args:  # keeps the keys of campaigns without side arguments as they were
            definition["args"] = list(self.args)
        text = json.dumps(definition, sort_keys=True)
        return f"{self.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.env.items())]
        if self.python:
            parts.append(f"python={self.python}")
        parts.extend(self.args)
        return " ".join(parts) or "(unchanged environment)"

    def to_json(self) -> dict:
        return {"name": self.name, "env": dict(self.env), "python": self.python, "args": list(self.args)}

    @classmethod
    def from_json(cls, d: dict) -> "Side":
        return cls(name=d["name"], env=dict(d.get("env") or {}), python=d.get("python") or "",
                   args=tuple(d.get("args") or ()))


@attrs.frozen
class OpSpec:
    """One op of the campaign: its directory name and the OP argument its command gets.

    ``command`` is the zlf sub-command a run starts: ``run`` (an op), or ``task`` (``run_spec``
    is then a task package folder, judged with each side's ``--candidate``).
    """

    name: str
    run_spec: str
    source: str = ""  # the op's file, for the switch guard ("" = built-in or an extension's)
    command: str = "run"

    @classmethod
    def parse(cls, text: str) -> "OpSpec":
        """``op``, ``op:FILE.py`` (docs/ab.md), or ``FILE.py[::NAME]`` as ``zlf run`` takes it;
        ``op:WORD[::NAME]`` where WORD is not a file is an extension's spelling (flaggems'
        ``mm:blas_perf::test_blas_benchmark``), passed on unchanged."""
        head, sep, tail = text.partition("::")
        if ":" in head:
            name, _, path = head.partition(":")
            if not name or not path:
                raise UsageError(f"op {text!r}: expected OP or OP:OP_FILE")
            is_file = os.path.exists(path) or path.endswith(".py")
            if is_file and sep:
                raise UsageError(f"op {text!r}: expected OP:OP_FILE or FILE.py::NAME, not both")
            if is_file:
                return cls(name, f"{os.path.abspath(path)}::{name}", os.path.abspath(path))
            return cls(name, text)
        if sep:
            return cls(tail or Path(head).stem, f"{os.path.abspath(head)}::{tail}" if tail else os.path.abspath(head),
                       os.path.abspath(head))
        if text.endswith(".py"):
            return cls(Path(text).stem, os.path.abspath(text), os.path.abspath(text))
        return cls(text, text)

    def to_json(self) -> dict:
        return attrs.asdict(self)


def _tuple(value) -> tuple:
    """A list of names (campaign.json's arrays): refused, not split into characters, when it is
    not one."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of names, got {value!r}")
    return tuple(value)


def _text(value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _mapping(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {value!r}")
    return dict(value)


@attrs.frozen
class Statistics:
    """campaign.json's ``statistics``, typed: the verdict rule's settings, the rounds, the noise
    pooled in and the controls. A campaign of an older zlf lacks some fields: their defaults are
    how it was decided (no controls; the one threshold at its default). ``to_json`` is the
    on-disk form (docs/formats: campaign.schema.json)."""

    alpha: float = stats.Settings().alpha  # campaign.json always has it (its schema requires it)
    controls: str = attrs.field(default=ctl.NONE, converter=lambda v: ctl.NONE if v is None else v,
                                validator=attrs.validators.in_(ctl.MODES))
    min_effect_pct: float = stats.Settings().min_effect_pct
    pairing: str = attrs.field(default=stats.AUTO, converter=lambda v: v or stats.AUTO)
    trim: Optional[float] = None
    spending: str = "obrien-fleming"
    noise_from: Optional[str] = None
    #: ``{point: Noise as JSON}`` of the A/A campaign ``--noise-from`` named
    noise: dict = attrs.field(factory=dict, converter=_mapping)
    until_confident: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    #: rounds of the first look (every round of a fixed campaign)
    first_look: int = 0
    max_rounds: int = 0
    #: the canary ops the campaign added (:mod:`zlf.controls`) and why none were, if so
    canary_ops: tuple = attrs.field(default=(), converter=_tuple)
    controls_note: str = attrs.field(default="", converter=_text)

    @classmethod
    def from_json(cls, d: dict) -> "Statistics":
        """Of campaign.json (checked against its schema when read); fields this zlf no longer
        reads (``margin_pct``, ``floors``) are left in the file."""
        known = attrs.fields_dict(cls)
        return cls(**{k: v for k, v in d.items() if k in known})

    def to_json(self) -> dict:
        return {"controls": self.controls, "alpha": self.alpha, "min_effect_pct": self.min_effect_pct,
                "pairing": self.pairing, "trim": self.trim, "spending": self.spending, "noise_from": self.noise_from,
                "noise": dict(self.noise), "until_confident": self.until_confident, "first_look": self.first_look,
                "max_rounds": self.max_rounds, "canary_ops": list(self.canary_ops), "controls_note": self.controls_note}

    @property
    def settings(self) -> stats.Settings:
        """The verdict rule's knobs (:class:`zlf.stats.Settings`): read here and only here."""
        return stats.Settings(alpha=self.alpha, min_effect_pct=self.min_effect_pct, trim=self.trim,
                              pairing=self.pairing)

    @property
    def plan(self) -> Optional[stats.SpendingPlan]:
        """The alpha spending of an adaptive campaign's looks; None for a fixed one."""
        if not self.until_confident:
            return None
        return stats.SpendingPlan(self.first_look, self.max_rounds, self.alpha)


@attrs.frozen
class Driving:
    """How the driver runs the campaign: campaign.json's ``backend``, ``device``,
    ``require_idle``, ``idle_wait`` and ``scale`` (``--gpus`` / ``--executor`` ...; None: the
    plain path)."""

    backend: Optional[str] = None
    device: Optional[int] = 0
    require_idle: bool = attrs.field(default=False, converter=bool)
    idle_wait: float = 60.0
    scale: Optional[dict] = None

    @classmethod
    def from_json(cls, d: dict) -> "Driving":
        """Of campaign.json's fields (``d``: the whole document)."""
        return cls(**{k: d[k] for k in attrs.fields_dict(cls) if k in d})


@attrs.frozen
class Look:
    """One look of an adaptive campaign (campaign.json's ``looks``)."""

    rounds: int
    alpha: float
    points: int
    decided: int
    undecided: int
    ops_extended: tuple = attrs.field(default=(), converter=_tuple)
    at: str = ""

    @classmethod
    def from_json(cls, d: dict) -> "Look":
        known = attrs.fields_dict(cls)
        return cls(**{k: v for k, v in d.items() if k in known})

    def to_json(self) -> dict:
        return {**attrs.asdict(self), "ops_extended": list(self.ops_extended)}


class Campaign(Execution):
    """campaign.json, read and rewritten as runs start and finish.

    ``hooks``: the driver's :class:`zlf.plugins.Hooks`, asked what extensions add to each run
    (``campaign_run_needs``) and how to split a shared process's files; None: nothing is added.
    """

    def __init__(self, path: Path, data: dict, hooks=None):
        self.path = Path(path)
        self.data = data
        self.hooks = hooks
        self._key: Optional[bytes] = None  # this user's signing key, read at the first save
        self._ticked: Optional[float] = None  # the driver's clock at its last tick (None: not driving)
        #: ``{shared key: [run dirs]}`` of the shared processes handed to an executor
        self.groups: dict = {}

    # ------------------------------------------------------------------ create / open
    @classmethod
    def create(cls, parent, label: str, data: dict, hooks=None, configs=None) -> "Campaign":
        """A new campaign directory with campaign.json and each side's run configuration.

        :param configs: ``{side name: RunConfig}`` (:func:`zlf.ab.sides.side_configs`); default:
            a plain ``zlf run`` configuration for both sides.
        """
        rundir = RunDir.create(Path(parent).absolute(), f"ab_{label}")  # same naming and no-reuse rule as runs
        c = cls(rundir.path, {"format": FORMAT_VERSION, "zlf_version": __version__, "status": C_RUNNING,
                              "started": now(), "finished": None, "runs": [], "looks": [], **data}, hooks)
        c.write_configs(configs)
        c.seal()
        c.save()
        return c

    # ------------------------------------------------------------------ the sides' run configurations
    def write_configs(self, configs=None) -> None:
        """Write ``_config/<side>.json`` for each side and record them (``configs``) in campaign.json;
        sealed with the campaign (:meth:`code_files`)."""
        from ..config import RunConfig

        if configs is None:
            command = next((o.command for o in self.ops), "run")
            configs = {name: RunConfig(command=command) for name in self.sides}
        paths = {}
        for name, config in configs.items():
            paths[name] = f"{CONFIGS}/{name}.json"
            config.write(self.path / paths[name])
        self.data["configs"] = paths

    def config_path(self, side: str) -> Path:
        """Side ``side``'s run configuration file (inside the campaign, whatever campaign.json says)."""
        from ..rundir import inside

        configs = self.data.get("configs")
        if not isinstance(configs, dict) or not isinstance(configs.get(side), str):
            raise UsageError(f"campaign {self.path} has no run configuration of side {side} (made by an older zlf: "
                             "zlf ab --resume upgrades it)")
        return inside(self.path, self.path / configs[side])

    def config(self, side: str):
        """Side ``side``'s :class:`~zlf.config.RunConfig`."""
        from ..config import RunConfig

        return RunConfig.read(self.config_path(side))

    # ------------------------------------------------------------------ trust on --resume
    def code_files(self) -> dict:
        """``{label: path}`` of what the runs execute besides zlf: each side's interpreter, op
        files, task candidates (``--candidate FILE`` among a side's arguments)."""
        files = {}
        for side in self.sides.values():
            if side.python:
                files[f"side {side.name}'s interpreter"] = side.python
            for flag, value in zip(side.args, side.args[1:]):
                if flag == "--candidate":
                    files[f"side {side.name}'s candidate"] = value
        for op in self.ops:
            if op.source and os.path.isfile(op.source):
                files[f"op file of {op.name}"] = op.source
        for name, path in sorted((self.data.get("configs") or {}).items()):
            files[f"side {name}'s run configuration"] = str(self.path / path)
        return files

    def seal(self) -> None:
        """Record the identity of every file in :meth:`code_files` and sign :data:`SIGNED`.
        Without a key (an unwritable home) the campaign runs but cannot be resumed."""
        self.data["identities"] = {label: file_identity(path) for label, path in self.code_files().items()}
        key = signing_key(create=True)
        self.data["signature"] = _sign(key, self.data) if key else None
        self._key = key

    def state_problem(self) -> Optional[str]:
        """Why campaign.json's decision state (:data:`STATE`: the screen's cleared and frozen points,
        the looks, the statistics) cannot be taken as what zlf ab last saved, in one phrase; None
        when it verifies with this user's key. An edit there would forge verdicts no run measured."""
        key = signing_key(create=False)
        if key is None:
            return f"no campaign signing key of this user ({key_path()}): cannot verify campaign.json's verdicts"
        signature = self.data.get("state_mac")
        if signature is None:
            return ("campaign.json has no signed decision state (a campaign of a zlf before it was signed, or one "
                    "it was removed from): its verdicts cannot be verified")
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _sign_state(key, self.data)):
            return ("campaign.json's screening, looks or statistics are not what zlf ab last saved (edited, or made "
                    "by another user, machine or zlf version)")
        return None

    def verdict_problem(self) -> Optional[str]:
        """Why the verdicts a reader shows from this campaign (``--status``, ``zlf report``) may
        not be what zlf ab decided, in one phrase; None when every signed part verifies with this
        user's key: the decision state (:meth:`state_problem`), what the campaign ran
        (:data:`SIGNED`) and its runs (:data:`RECORD`)."""
        problem = self.state_problem()
        if problem is not None:
            return problem
        key = signing_key(create=False)
        signature = self.data.get("signature")
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _sign(key, self.data)):
            return ("campaign.json's sides, ops or arguments are not what zlf ab wrote when it created this "
                    "campaign (edited, or made by another user, machine or zlf version)")
        record = self.data.get("record_mac")
        if not isinstance(record, str) or not hmac.compare_digest(record, _sign_fields(key, self.data, RECORD,
                                                                                        b"record")):
            return ("campaign.json's runs or status are not what zlf ab last saved (edited, or saved by a zlf "
                    "before they were signed)")
        return None

    def check_state(self, where: str = "--resume") -> None:
        """Refuse (UsageError) a campaign whose decision state does not verify
        (:meth:`state_problem`)."""
        problem = self.state_problem()
        if problem is None:
            return
        if problem.endswith("(edited, or made by another user, machine or zlf version)"):
            problem += ": refusing to take its verdicts"
        raise UsageError(f"{where}: {problem}; start a new campaign")

    def check_resume(self, named: dict, where: str = "--resume") -> None:
        """Refuse (UsageError) to resume a campaign whose command lines zlf ab did not write:
        the signature of :data:`SIGNED` must verify with this user's key, and every file the
        runs execute must be the one recorded at creation -- an interpreter may instead be named
        again (``named``: ``{"A": path or None, "B": ...}``), then its new identity is recorded."""
        key = signing_key(create=False)
        if key is None:
            raise UsageError(f"{where}: no campaign signing key of this user ({key_path()}): cannot verify "
                             "what campaign.json would run; start a new campaign")
        try:
            sides = self.sides
        except (KeyError, TypeError, AttributeError):
            raise UsageError(f"{where}: campaign.json has no valid sides") from None
        for name, path in named.items():
            if not path:
                continue
            side = sides.get(name)
            recorded = side.python if side else ""
            if not recorded or os.path.realpath(path) != os.path.realpath(recorded):
                was = recorded or "the driver's own"
                raise UsageError(f"{where}: --{name.lower()}-python {path!r} is not side {name}'s interpreter of this "
                                 f"campaign ({was}); start a new campaign to change it")
        signature = self.data.get("signature")
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _sign(key, self.data)):
            raise UsageError(f"{where}: campaign.json's sides, ops or arguments are not what zlf ab wrote when it "
                             "created this campaign (edited, or made by another user, machine or zlf version): "
                             "refusing to run them; start a new campaign")
        identities = self.data.get("identities") or {}
        vouched = {f"side {n}'s interpreter" for n, p in named.items() if p}
        for label, path in self.code_files().items():
            if label in vouched:
                continue
            change = identity_change(identities.get(label), path)
            if change:
                again = (f"; name it again with --{label[5].lower()}-python PATH to run it"
                         if label.endswith("interpreter") else "; start a new campaign")
                raise UsageError(f"{where}: {label} {path} {change} since the campaign started{again}")
        if vouched:
            self.seal()  # the interpreter the user named again is the recorded one from now on

    @classmethod
    def open(cls, path, hooks=None) -> "Campaign":
        p = Path(path)
        f = p / CAMPAIGN
        if not f.is_file():
            raise UsageError(f"{str(path)!r} is not a zlf ab campaign (no {CAMPAIGN})")
        data = readers.read_json(f, schema="campaign", what=CAMPAIGN)  # bounded, of the schema: one line if not
        if data.get("format") != FORMAT_VERSION:
            raise UsageError(f"{f}: campaign format {data.get('format')!r}, this zlf reads {FORMAT_VERSION}")
        return cls(p, data, hooks)

    def save(self, last: bool = False) -> None:
        """Rewrite campaign.json atomically. ``last``: the state the campaign stops in, written on a
        full disk as a run's last meta.json is (the reserve given back, then compactly, then in
        place: :meth:`RunDir.write_meta`). A campaign where nothing can be written (a read-only
        copy) is a one-line UsageError."""
        # shared like a run's records: no credential (a Ray address's password); what is signed is
        # this redacted form, so a resumed campaign verifies (give --ray-address again)
        self.tick()
        key = self._key = self._key or signing_key(create=False)
        if key:  # the decision state and the runs as they are now, signed (check_state, verdict_problem)
            self.data["state_mac"] = _sign_state(key, self.data)
            self.data["record_mac"] = _sign_fields(key, self.data, RECORD, b"record")
        data = redact(self.data)
        text = json.dumps(data, indent=2, default=str) + "\n"
        try:
            if last:
                RunDir(self.path).write_meta(data, name=CAMPAIGN, sort_keys=False)
            else:
                write_atomic(self.path / CAMPAIGN, text)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise UsageError(f"cannot write {self.path / CAMPAIGN}: {exc.strerror}; a campaign runs and resumes "
                             "where it can be written (copy it somewhere writable)") from exc

    def start_clock(self) -> None:
        """Count this driver's time into ``driver_s`` (the campaign's own elapsed time, summed over
        its drivers) from now on, a tick at each save: a driver killed outright loses only the
        time since its last save."""
        self._ticked = time.monotonic()

    def stop_clock(self) -> None:
        """The driving is over: its time counted, none after (the report's own work is not the campaign's)."""
        self.tick()
        self._ticked = None

    def tick(self) -> None:
        if self._ticked is None:
            return
        t = time.monotonic()
        self.data["driver_s"] = round(float(self.data.get("driver_s") or 0.0) + t - self._ticked, 2)
        self._ticked = t

    # ------------------------------------------------------------------ the plan
    @property
    def sides(self) -> dict:
        return {s["name"]: Side.from_json(s) for s in self.data["sides"]}

    @property
    def ops(self) -> list:
        return [OpSpec(**o) for o in self.data["ops"]]

    @property
    def runs(self) -> list:
        return self.data["runs"]

    @property
    def library(self) -> bool:
        """Whether this campaign A/Bs a library (``--library``): a failed run's partner of the same
        round still runs, so that each op's outcome is known per side."""
        return bool(self.data.get("library"))

    @property
    def processes(self) -> dict:
        """``{process key: {"round", "side", "ops", "rc", "seconds", "split"}}``: every finished
        process's wall time and time split (:meth:`~zlf.ab.execute.Execution.note_process`)."""
        return self.data.get("processes") or {}

    def skip_reason(self, run: dict, failed_ops: Optional[dict] = None) -> Optional[str]:
        """Why ``run`` is not started, its op having failed: None when it runs. A library campaign
        runs the failed run's partner of the same round (the op's outcome on that side).
        ``failed_ops``: :meth:`failed_ops`, when the caller has it."""
        failed = (self.failed_ops() if failed_ops is None else failed_ops).get(run["op"])
        if not failed:
            return None
        if self.library and run["round"] == failed["round"]:
            return None
        return f"op failed in r{failed['round']}_{failed['side']}"

    # ------------------------------------------------------------------ the state, typed
    @property
    def statistics(self) -> Statistics:
        """campaign.json's ``statistics`` (:class:`Statistics`)."""
        return Statistics.from_json(self.data["statistics"])

    def set_statistics(self, **changes) -> None:
        """Change fields of ``statistics`` (checked as :class:`Statistics` fields)."""
        attrs.evolve(self.statistics, **changes)  # an unknown field is a TypeError here
        self.data["statistics"].update(changes)

    @property
    def aa(self) -> bool:
        """Whether this is an A/A calibration (B a copy of A)."""
        return bool(self.data.get("aa"))

    @property
    def status(self) -> str:
        return self.data["status"]

    @property
    def metric(self) -> str:
        """What the verdicts decide on (:mod:`zlf.metrics`)."""
        from .. import metrics

        return self.data.get("metric") or metrics.DEFAULT

    @property
    def looks(self) -> list:
        """The looks of an adaptive campaign so far (:class:`Look`)."""
        return [Look.from_json(x) for x in self.data.get("looks") or ()]

    def add_look(self, look: Look) -> None:
        self.data.setdefault("looks", []).append(look.to_json())

    @property
    def frozen(self) -> dict:
        """``{point: (verdict, rounds)}`` decided at earlier looks of an adaptive campaign."""
        return {p: tuple(v) for p, v in (self.data.get("frozen") or {}).items()}

    @property
    def context(self) -> list:
        """The extensions' lines about the campaign (``campaign_context``)."""
        return list(self.data.get("context") or ())

    @property
    def scale(self) -> Optional[dict]:
        """``--gpus`` / ``--executor`` ... as stored (None: the plain path)."""
        return self.data.get("scale")

    @property
    def driving(self) -> Driving:
        return Driving.from_json(self.data)

    @property
    def fail_if_slower(self) -> Optional[float]:
        """``--fail-if-slower``'s percentage (None: not given)."""
        if not self.data.get("fail_on_slower"):
            return None
        return self.data.get("fail_if_slower_pct") or 0.0

    @property
    def driver_pid(self) -> Optional[int]:
        return self.data.get("driver_pid")

    @property
    def cwd(self) -> str:
        """Where the runs start (the driver's working directory at creation)."""
        return self.data["cwd"]

    @property
    def triton_cache(self) -> str:
        return self.data["triton_cache"]

    @property
    def run_args(self) -> list:
        """Arguments of the ops' own command that are no run setting (``zlf task``'s ``--cases``)."""
        return list(self.data.get("run_args") or ())

    @property
    def switch_guard(self) -> list:
        """``[{"name", "found", "searched"}]``: where each switch was found at creation."""
        return list((self.data.get("guards") or {}).get("switch_source") or ())

    def planned_rounds(self) -> int:
        return max((r["round"] for r in self.runs), default=0)

    def add_round(self, k: int, ops=None) -> None:
        """Append round ``k``: odd rounds A then B, even rounds B then A (cancels one-way drift);
        within a round each op's pair runs back to back. ``ops``: only these op names (an
        adaptive campaign extends only the ops with an undecided point)."""
        order = ("A", "B") if k % 2 == 1 else ("B", "A")
        alone = {r["op"] for r in self.runs if r.get("alone")}
        for op in self.ops:
            if ops is not None and op.name not in ops:
                continue
            for side in order:
                self.runs.append({"op": op.name, "round": k, "side": side, "dir": f"{op.name}/r{k}_{side}",
                                  "status": PENDING, "rc": None, "started": None, "finished": None,
                                  "seconds": None, "flags": [], "error": None})
                if op.name in alone:  # it failed or crashed in a shared process: it runs alone
                    self.runs[-1]["alone"] = True
        self.save()

    def run_dir(self, run: dict) -> Path:
        return self.path / run["dir"]

    def find(self, op: str, k: int, side: str) -> Optional[dict]:
        for r in self.runs:
            if r["op"] == op and r["round"] == k and r["side"] == side:
                return r
        return None

    def failed_ops(self) -> dict:
        """``{op: first failed run}`` for ops with any failed run."""
        out = {}
        for r in self.runs:
            if r["status"] == FAILED:
                out.setdefault(r["op"], r)
        return out

    def incomplete_ops(self, rounds: Optional[int] = None) -> dict:
        """``{op: [r<k>_<side> not done]}`` for ops without a failed run but with a planned run
        (up to ``rounds``) that did not finish ok: such an op gets no report either."""
        failed = self.failed_ops()
        rounds = rounds or self.planned_rounds()
        out: dict = {}
        for r in self.runs:
            if r["op"] not in failed and r["round"] <= rounds and r["status"] != OK:
                out.setdefault(r["op"], []).append(f"r{r['round']}_{r['side']} {r['status']}")
        return out

    def log_path(self, run: dict) -> Path:
        return self.path / run["op"] / LOGS / f"r{run['round']}_{run['side']}.txt"

    # ------------------------------------------------------------------ one run
    def lost_runs(self) -> list:
        """The runs filed ok with point records (``records``) whose results.jsonl is gone since
        (deleted by another op's process, or by hand): their rounds are not measured."""
        return [r for r in self.runs if r["status"] == OK and r.get("records")
                and not (self.run_dir(r) / RESULTS).is_file()]

    def reopen_lost(self) -> list:
        """Make the round of every lost run (both sides: one pair, one way) pending again, to be
        measured again; returns the lost runs' directories."""
        lost = self.lost_runs()
        for run in lost:
            for side in ("A", "B"):
                r = self.find(run["op"], run["round"], side)
                if r is not None and r["status"] == OK:
                    r.update(status=PENDING, started=None, finished=None, records=False)
        if lost:
            self.save()
        return [r["dir"] for r in lost]

    def discard_partial(self, run: dict) -> None:
        """Remove what an interrupted run left (it is re-run whole)."""
        for p in (self._staging(run), self.run_dir(run)):
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)

    def _staging(self, run: dict) -> Path:
        return self.path / run["op"] / STAGING / f"r{run['round']}_{run['side']}"

    # ------------------------------------------------------------------ shared processes
    @property
    def shared(self) -> bool:
        """Whether the ops of a (round, side) share one process (campaigns before this: no)."""
        return self.data.get("process") == SHARED_PROCESS

    def shares(self, run: dict, index: Optional[tuple] = None) -> bool:
        """Whether ``run`` goes into a shared process: not once its op has failed or crashed in
        one (from that round on the op runs alone), nor for a task package. ``index``:
        :meth:`share_index`, for a caller that asks of many runs (a library has thousands)."""
        if not self.shared:
            return False
        alone, commands = index if index is not None else self.share_index()
        return commands.get(run["op"]) == "run" and run["op"] not in alone

    def share_index(self) -> tuple:
        """``(ops sent alone, {op: its command})``: what :meth:`shares` reads."""
        return ({r["op"] for r in self.runs if r.get("alone")},
                {o["name"]: o.get("command") or "run" for o in self.data["ops"]})

    def next_run(self) -> Optional[dict]:
        """The run to start next: the earliest round first, in the round's side order (a shared
        process of side A before B's in odd rounds), else campaign order."""
        todo = [(i, r) for i, r in enumerate(self.runs) if r["status"] not in (OK, FAILED, SKIPPED)]
        if not todo:
            return None
        def order(item):
            i, r = item
            return r["round"], ("A", "B").index(r["side"]) ^ (0 if r["round"] % 2 else 1), i
        return min(todo, key=order)[1]

    def op_spec(self, name: str) -> OpSpec:
        return OpSpec(**next(o for o in self.data["ops"] if o["name"] == name))

    def needs(self, run: dict) -> list:
        """What the active extensions add to ``run``: :class:`~zlf.ab.extending.RunNeed` objects."""
        if self.hooks is None:
            return []
        return self.hooks.campaign_run_needs(campaign=self, op=self.op_spec(run["op"]), round=run["round"],
                                             side=run["side"])

    def sources(self, run: dict) -> list:
        """``[(need, campaign-relative directory)]`` for each need of ``run`` on an earlier run."""
        return [(n, self.source_dir(run["op"], n.round, n.side)) for n in self.needs(run) if n.round is not None]

    def origin(self, run: dict) -> tuple:
        """The directories ``run`` reads from earlier runs: ops share a process only with ops
        that read the same ones."""
        return tuple(sorted({d for _, d in self.sources(run)}))

    def source_dir(self, op: str, k: int, side: str) -> str:
        """The campaign-relative directory of run ``r<k>_<side>`` of ``op`` as later runs read it:
        the shared process that ran it (kept for that), else ``<op>/r<k>_<side>``. Before it has
        run (a scaled campaign builds a unit's specs up front): the shared process it is in."""
        first = self.find(op, k, side) or {}
        if first.get("process"):
            return first["process"]
        if first.get("status") != OK:
            for key in reversed(list(self.groups)):
                if first.get("dir") in self.groups[key]:
                    return key
        return first.get("dir") or f"{op}/r{k}_{side}"

    def is_source(self, runs: list, raw: Path) -> bool:
        """Whether a later run reads the directory ``raw`` that ran ``runs`` (one round and side)."""
        k, side, ops = runs[0]["round"], runs[0]["side"], {r["op"] for r in runs}
        return any(n.round == k and n.side == side and (raw / n.path).exists()
                   for r in self.runs if r["op"] in ops for n in self.needs(r) if n.round is not None)

    def shared_groups(self, runs=None) -> list:
        """``[[run, ...]]``: the pending shared runs (or ``runs``) grouped by round, side and
        :meth:`origin`, in campaign order (the group of the first pending run first)."""
        failed, index = self.failed_ops(), self.share_index()
        todo = runs if runs is not None else [
            r for r in self.runs if r["status"] in (PENDING, RUNNING) and self.shares(r, index) and r["op"] not in failed]
        groups: dict = {}
        chunk = self.chunks()
        for r in todo:
            groups.setdefault((r["round"], r["side"], chunk.get(r["op"], 0), self.origin(r)), []).append(r)
        return list(groups.values())

    def chunks(self) -> dict:
        """``{op: chunk}``: a library campaign spread over GPUs (``library.chunks``, one per GPU of
        ``--gpus``) runs a round's ops as that many shared processes per side, each chunk a unit
        of its own (A and B on one GPU), ops dealt round-robin in campaign order; else one chunk."""
        n = int((self.data.get("library") or {}).get("chunks") or 1)
        if n <= 1:
            return {}
        return {o["name"]: i % n for i, o in enumerate(self.data["ops"])}

    def processes_left(self) -> int:
        """How many processes the pending runs still take: one per round and side whose ops
        share one, one per run that runs alone (an op that failed is skipped without one). By
        round and side, not :meth:`shared_groups`: before round 1 A has run, the runs that will
        read it name their own directories, which would split its groups."""
        failed, index = self.failed_ops(), self.share_index()
        pending = [r for r in self.runs if r["status"] in (PENDING, RUNNING) and not self.skip_reason(r, failed)]
        chunk = self.chunks()
        shared = {(r["round"], r["side"], chunk.get(r["op"], 0)) for r in pending if self.shares(r, index)}
        return len(shared) + sum(1 for r in pending if not self.shares(r, index))

    def shared_key(self, runs: list) -> str:
        """A fresh ``_shared/r<k>_<side>[-n]`` for one process of ``runs`` (never reused: a
        process re-run after a crash keeps the first one's log)."""
        base = f"{SHARED}/r{runs[0]['round']}_{runs[0]['side']}"
        taken = {r.get("process") for r in self.runs} | set(self.groups)
        for n in range(1, 10000):
            key = base if n == 1 else f"{base}-{n}"
            if key not in taken and not (self.path / SHARED / LOGS / f"{Path(key).name}.txt").exists():
                self.groups[key] = [r["dir"] for r in runs]
                return key
        raise RuntimeError(f"no free key for {base}")

    def start(self, run: dict, worker: Optional[dict] = None) -> None:
        self.start_all([run], worker)

    def start_all(self, runs: list, worker: Optional[dict] = None) -> None:
        """Mark ``runs`` running (one process's), then save once."""
        for run in runs:
            run.update(status=RUNNING, started=now(), finished=None, rc=None, error=None, flags=[])
            if worker:
                run.update(worker)
        self.save()

def file_identity(path) -> dict:
    """``realpath``, ``size``, ``mtime_ns`` and ``sha256`` of a file (empty dict if unreadable)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        digest = hashlib.sha256()
        with open(real, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return {}
    return {"realpath": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest.hexdigest()}


def identity_change(recorded, path) -> Optional[str]:
    """How ``path`` differs from its recorded identity, or None. The content decides (a touched
    but unchanged file is the same file)."""
    now_ = file_identity(path)
    if not now_:
        return "cannot be read"
    if not isinstance(recorded, dict) or not recorded:
        return "has no recorded identity"
    if now_["realpath"] != recorded.get("realpath"):
        return f"now resolves to {now_['realpath']} (was {recorded.get('realpath')})"
    if now_["sha256"] != recorded.get("sha256") or now_["size"] != recorded.get("size"):
        return "changed (its sha256 differs)"
    return None


def key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "zlf" / KEY_FILE


def signing_key(create: bool) -> Optional[bytes]:
    """This user's campaign key: private (0600, owned by this user), made on first use."""
    path = key_path()
    if create and not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        st = os.stat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None  # another user could read (forge) or replace it
        text = readers.read_text(path, limit=4 * 1024, what="campaign key").strip()
    except (OSError, UsageError):
        return None
    return text.encode() if len(text) >= 32 else None


def _sign(key: bytes, data: dict) -> str:
    signed = SIGNED + ("configs",) if "configs" in data else SIGNED  # a campaign before them: as it was signed
    body = json.dumps(redact({k: data.get(k) for k in signed}), sort_keys=True, default=str)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def _sign_state(key: bytes, data: dict) -> str:
    return _sign_fields(key, data, STATE, b"state")


def _sign_fields(key: bytes, data: dict, fields: tuple, tag: bytes) -> str:
    # as campaign.json keeps them (read back: tuples as lists, keys as strings), so that the
    # fields read back sign as the fields saved did
    kept = json.loads(json.dumps(redact({k: data.get(k) for k in fields}), default=str))
    body = json.dumps(kept, sort_keys=True)
    return hmac.new(key, tag + b"\0" + body.encode(), hashlib.sha256).hexdigest()


