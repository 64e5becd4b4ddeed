"""A run's settings as one frozen, typed object, written to and read from JSON.

:class:`RunConfig` holds what a run needs (backend, device, ops, dtypes, where it writes, which
extensions, a :class:`TimingBudget`, and the options each extension declared); a child process
(a capture probe, a task worker, ``zlf run --config FILE``) gets it as a file, never as
re-spelt flags. :meth:`RunConfig.from_args` is the one place that reads a parsed command line
for run settings.

Extension options are declared by the extension that owns them, through ``add_options``: every
argument it adds becomes an :class:`Option` (its type read from the argument), grouped in one
:class:`OptionSet` per extension (:func:`declared_options`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional

import attrs

from .errors import UsageError
from .options import NUMBERS, Number
from .records import COMMAND_WIRING

FORMAT = 1
MIN_SAMPLES = 5
MAX_SAMPLES = 10_000
#: sets of a flushed point's inputs its calls cycle through, one set per call (``--input-copies``;
#: :func:`zlf.timing.input_copies`)
INPUT_COPIES = 32


class ConfigError(UsageError):
    """A configuration file or value that cannot be used: one line, exit code 2."""


# ----------------------------------------------------------------------------- extension options
@attrs.frozen
class Option:
    """One command-line option an extension declared: its ``dest``, flag, type and default."""

    dest: str
    flag: str
    type: str  # bool | int | float | str | list | any
    default: Any = None
    choices: Optional[tuple] = None
    help: str = ""
    #: the range a numeric option takes (its ``type=`` was a :class:`zlf.options.Number`)
    number: Optional[Number] = attrs.field(default=None, eq=False, repr=False)

    @classmethod
    def from_action(cls, action: argparse.Action, how=None) -> "Option":
        """The option ``action`` stands for; ``how``: the ``action=`` it was added with
        (``"append"``, ``"count"`` ...), None for a plain value."""
        how = how if isinstance(how, str) else None
        if how in ("append", "append_const", "extend") or action.nargs in ("*", "+") or (
                isinstance(action.nargs, int) and action.nargs > 1):
            kind = "list"
        elif how == "count":
            kind = "int"
        elif action.nargs == 0:  # a flag: store_true / store_false / store_const
            kind = "bool" if isinstance(action.const, bool) else "any"
        elif isinstance(action.type, Number):
            kind = "int" if action.type.kind is int else "float"
        else:  # a converter of the extension's own: its values are whatever it returns
            kind = {int: "int", float: "float", str: "str", None: "str"}.get(action.type, "any")
        flag = max(action.option_strings, key=len) if action.option_strings else action.dest
        default = action.default
        if isinstance(default, str) and callable(action.type) and kind != "list":
            try:  # argparse converts a string default through type= as it converts a given value
                default = action.type(default)
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                pass  # argparse refuses it when the command line leaves it out; so does check()
        return cls(dest=action.dest, flag=flag, type=kind, default=_frozen(default),
                   choices=tuple(action.choices) if action.choices else None, help=action.help or "",
                   number=action.type if isinstance(action.type, Number) and kind != "list" else None)

    def check(self, value, owner: str, as_json: bool = False):
        """``value`` as this option holds it (lists as tuples), or :class:`ConfigError`.
        ``as_json``: as a run's JSON configuration holds it (a run option's value)."""
        value = _frozen(value)
        if value is None:
            return value
        ok = {"bool": lambda v: isinstance(v, bool), "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "str": lambda v: isinstance(v, str), "list": lambda v: isinstance(v, tuple),
              "any": lambda v: True}[self.type]
        if not ok(value):
            raise ConfigError(f"option {self.flag} of extension {owner!r}: expected {self.type}, got {value!r}")
        if self.type == "float":
            value = float(value)
        if as_json and self.type in ("any", "list"):
            value = _json_value(value, self.flag, owner)
        if self.number is not None:
            why = self.number.why_not(value)
            if why:
                raise ConfigError(f"option {self.flag} of extension {owner!r}: {value!r}: expected {why}")
        if self.choices is not None and self.type != "list" and value not in self.choices:
            raise ConfigError(f"option {self.flag} of extension {owner!r}: {value!r} is not one of "
                              f"{', '.join(map(str, self.choices))}")
        return value


@attrs.frozen
class OptionSet:
    """The options one extension added to the run commands."""

    owner: str
    options: tuple = ()

    def get(self, dest: str) -> Optional[Option]:
        return next((o for o in self.options if o.dest == dest), None)


class Declaring:
    """A parser (or one of its groups) as an ``add_options`` implementation is handed it: every
    argument added through it or the groups it makes is kept in ``added`` as ``(action, how)``
    (``how``: the ``action=`` given). Everything else is the parser's own."""

    def __init__(self, target, added=None):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "added", [] if added is None else added)

    def add_argument(self, *args, **kwargs):
        action = self._target.add_argument(*args, **kwargs)
        self.added.append((action, kwargs.get("action")))
        return action

    def add_argument_group(self, *args, **kwargs):
        return Declaring(self._target.add_argument_group(*args, **kwargs), self.added)

    def add_mutually_exclusive_group(self, *args, **kwargs):
        return Declaring(self._target.add_mutually_exclusive_group(*args, **kwargs), self.added)

    def __getattr__(self, name):
        return getattr(self._target, name)

    def __setattr__(self, name, value):
        setattr(self._target, name, value)


def declare(pm, parser, command: str = "run", traits=None, hook: str = "add_options") -> list:
    """Call every ``add_options`` implementation (or those of ``hook``: ``add_campaign_options``)
    on ``parser`` of ``command``, a command that does ``traits`` (:class:`zlf.options.CommandTraits`;
    None: what ``zlf run`` does), in pluggy's call order: ``[(extension, [(action, how), ...])]``,
    what each added."""
    from .options import RUN_TRAITS

    declared = []
    given = {"parser": None, "command": command, "traits": RUN_TRAITS if traits is None else traits}
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):
        view = Declaring(parser)
        impl.function(**{name: view if name == "parser" else given[name] for name in impl.argnames})
        added = [(a, how) for a, how in view.added if a.dest != argparse.SUPPRESS]
        if added:
            declared.append((impl.plugin_name, added))
    _refuse_shared_dests(declared)
    return declared


def _refuse_shared_dests(declared) -> None:
    """Extensions' options share one command line, so one ``dest`` names one extension's option:
    two that declare it are a conflict named in one line (as two providers of an exclusive hook
    are), not a type error about a value nobody gave."""
    owners: dict = {}
    for owner, added in declared:
        for action, _ in added:
            owners.setdefault(action.dest, {}).setdefault(owner, max(action.option_strings, key=len, default=action.dest))
    for dest, by in owners.items():
        if len(by) > 1:
            names = " and ".join(f"{o!r} ({flag})" for o, flag in by.items())
            raise ConfigError(f"extensions {names} both declare the option dest {dest!r}; keep one with --no-ext NAME")


def declared_options(pm, parser, command: str = "run", traits=None) -> tuple:
    """One :class:`OptionSet` per extension, made from the arguments its ``add_options`` added
    to ``parser`` of ``command`` (:func:`declare`)."""
    return option_sets_of(declare(pm, parser, command, traits))


def _json_value(value, flag: str, owner: str):
    """A value of an option whose ``type=`` is the extension's own converter, as a run's JSON
    configuration holds it: a path as its string, else refused in one line when not JSON data."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple):
        return tuple(_json_value(v, flag, owner) for v in value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ConfigError(f"option {flag} of extension {owner!r}: {value!r} is no JSON value (a run's configuration "
                          "is a JSON file): its type= must return a str, a number, a bool or a list") from None
    return value


def option_sets_of(declared) -> tuple:
    return tuple(OptionSet(owner, tuple(Option.from_action(a, how) for a, how in added)) for owner, added in declared)


def merged_option_sets(*groups) -> tuple:
    """One :class:`OptionSet` per owner over several commands' declarations (an extension
    offers a subset of its options on some commands: the union is what it owns)."""
    owners: dict = {}
    for sets in groups:
        for s in sets:
            owned = owners.setdefault(s.owner, {})
            for o in s.options:
                owned.setdefault(o.dest, o)
    return tuple(OptionSet(owner, tuple(opts.values())) for owner, opts in owners.items())


def _frozen(value):
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value):
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


class OptionAttributes:
    """Extensions' option values read as attributes (``opts.cudagraph_probe``) through the
    class's ``get``; an attribute of the class itself is never looked up this way."""

    def __getattr__(self, name: str):
        if name.startswith("_") or name in attrs.fields_dict(type(self)):
            raise AttributeError(name)
        marker = object()
        value = self.get(name, marker)
        if value is marker:
            raise AttributeError(f"no active extension declared option {name!r}")
        return value


@attrs.frozen(eq=True, hash=False)
class ExtensionOptions(OptionAttributes):
    """The values of the extensions' options, by owner: ``{"cudagraph": {"cudagraph_probe": ...}}``.

    Read one with attribute access (``opts.cudagraph_probe``) or :meth:`get`; option names are
    unique across extensions (they share one command line). Owner ``""`` holds values whose
    owner is unknown (a namespace built by hand).
    """

    values: Mapping = attrs.field(factory=dict, converter=lambda m: {o: {k: _frozen(v) for k, v in d.items()}
                                                                     for o, d in dict(m).items()})

    def get(self, name: str, default=None):
        for owned in self.values.values():
            if name in owned:
                return owned[name]
        return default

    def __contains__(self, name: str) -> bool:
        return any(name in owned for owned in self.values.values())

    def flat(self) -> dict:
        return {k: v for owned in self.values.values() for k, v in owned.items()}

    def to_json(self) -> dict:
        return {o: {k: _thawed(v) for k, v in sorted(d.items())} for o, d in sorted(self.values.items())}

    def bound(self, option_sets, as_json: bool = False) -> "ExtensionOptions":
        """Checked against the declarations: every value typed, missing ones at their default,
        an option no active extension declared is a :class:`ConfigError`. ``as_json``: values
        as a run's JSON configuration holds them (:meth:`Option.check`)."""
        declared = {s.owner: s for s in option_sets}
        for owner, owned in self.values.items():
            for dest in owned:
                if owner not in declared or declared[owner].get(dest) is None:
                    known = ", ".join(f"{s.owner}: {', '.join(o.dest for o in s.options)}" for s in option_sets)
                    raise ConfigError(f"option {dest!r} of extension {owner!r} is not declared by an active "
                                      f"extension (declared: {known or 'none'})")
        return ExtensionOptions({s.owner: {o.dest: o.check(self.values.get(s.owner, {}).get(o.dest, o.default),
                                                           s.owner, as_json) for o in s.options} for s in option_sets})


# ----------------------------------------------------------------------------- timing
@attrs.frozen
class TimingBudget:
    """How every point is timed: the ``options`` a ``time_fn`` and ``kernel_timer`` receive.

    ``None`` budgets and L2 policy mean the backend's defaults (:meth:`budgets`, :meth:`flush`).
    ``warmup``/``iters`` are call counts (``zlf task``), turned into ms budgets by the caller.
    The extensions' options ride along in ``extensions``; an attribute this class does not
    define is looked up there, so ``options.cudagraph_replay_ms`` reads as before.
    """

    timer: Optional[str] = None
    warmup_ms: Optional[float] = None
    rep_ms: Optional[float] = None
    flush_l2: Optional[bool] = None
    warmup: Optional[int] = None
    iters: Optional[int] = None
    min_samples: int = MIN_SAMPLES
    max_samples: int = MAX_SAMPLES
    #: sets of the inputs a flushed point's calls cycle through (None: :data:`INPUT_COPIES`)
    input_copies: Optional[int] = None
    #: stop sampling a point once its median's interval is within this many percent of it
    #: (``--max-noise``; None: the whole ``rep_ms`` budget, :func:`zlf.timing.time_direct`)
    max_noise: Optional[float] = None
    extensions: ExtensionOptions = attrs.field(factory=ExtensionOptions, eq=False, repr=False)

    def budgets(self, backend) -> tuple:
        """``(warmup_ms, rep_ms)``, each the backend's where not given."""
        return (backend.warmup_ms if self.warmup_ms is None else self.warmup_ms,
                backend.rep_ms if self.rep_ms is None else self.rep_ms)

    def flush(self, backend) -> bool:
        """Whether to flush L2 before each sample: ``--flush-l2`` / ``--no-flush-l2`` or the backend's default."""
        return backend.flush_l2_default if self.flush_l2 is None else bool(self.flush_l2)

    def copies(self) -> int:
        """Sets of the inputs a flushed point's calls cycle through (``--input-copies``)."""
        return INPUT_COPIES if self.input_copies is None else self.input_copies

    def option(self, name: str, default=None):
        """An extension option's value (``default`` when no active extension declared it)."""
        return self.extensions.get(name, default)

    def with_changes(self, **changes) -> "TimingBudget":
        return attrs.evolve(self, **changes)

    def __getattr__(self, name: str):
        if name.startswith("_") or name == "extensions":
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "extensions"), name)

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in attrs.fields(TimingBudget) if f.name != "extensions"}

    def check(self) -> None:
        """One-line refusals of a budget no timer can use (:data:`NUMBERS`)."""
        for field, (flag, number) in NUMBERS.items():
            section, _, name = field.rpartition(".")
            if section == "timing":
                number.check(getattr(self, name), flag)


def as_budget(options) -> TimingBudget:
    """``options`` as a :class:`TimingBudget`: itself, or one read from a namespace (a caller
    from before budgets existed) or None (the backend's defaults)."""
    if isinstance(options, TimingBudget):
        return options
    return RunConfig.from_args(options).timing


# ----------------------------------------------------------------------------- the run
#: command-line ``dest`` -> RunConfig field (``timing.X``: a TimingBudget field).
ARGS = {
    "command": "command", "ops": "ops", "dtype": "dtypes", "backend": "backend", "device": "device", "out": "out", "name": "name",
    "time_limit": "time_limit_s", "check": "check_mode", "format": "summary_format", "ext": "ext", "no_ext": "no_ext",
    "gpus": "gpus", "executor": "executor", "ray_address": "ray_address", "retries": "retries",
    "timer": "timing.timer", "warmup_ms": "timing.warmup_ms", "rep_ms": "timing.rep_ms",
    "flush_l2": "timing.flush_l2", "warmup": "timing.warmup", "iters": "timing.iters",
    "input_copies": "timing.input_copies", "max_noise": "timing.max_noise",
}
#: parsed-namespace entries that are the command line's own, never a run setting: the command's
#: wiring (:data:`zlf.records.COMMAND_WIRING`) and the file the settings come from.
NOT_SETTINGS = frozenset({*COMMAND_WIRING, "config"})


def _split_dtypes(values) -> tuple:
    return tuple(d.strip() for v in values or () for d in v.split(",") if d.strip())


def _names(values) -> Optional[tuple]:
    return None if values is None else tuple(values)


@attrs.frozen
class RunConfig:
    """Everything one run is: read from the command line (:meth:`from_args`) or a file (:meth:`read`).

    ``command`` is the command that runs it (``run``; an extension's, such as ``task``).
    """

    command: str = "run"
    ops: tuple = attrs.field(default=(), converter=tuple)
    dtypes: tuple = attrs.field(default=(), converter=tuple)
    backend: Optional[str] = None
    device: int = 0
    out: str = "runs"
    name: Optional[str] = None
    time_limit_s: Optional[float] = None
    #: --check: ``fail`` (a point failing its reference check is FAILED) or ``warn`` (timed, marked UNCHECKED)
    check_mode: str = attrs.field(default="fail", converter=lambda v: v or "fail")
    summary_format: str = "table"  # --format: how the summary prints (table, markdown, csv, json)
    ext: Optional[tuple] = attrs.field(default=None, converter=_names)
    no_ext: Optional[tuple] = attrs.field(default=None, converter=_names)
    gpus: Optional[str] = None
    executor: Optional[str] = None
    ray_address: Optional[str] = None
    retries: Optional[int] = None
    timing: TimingBudget = attrs.field(factory=TimingBudget)
    options: ExtensionOptions = attrs.field(factory=ExtensionOptions)

    def __attrs_post_init__(self):
        if self.timing.extensions is not self.options:  # the budget carries the same extension options
            object.__setattr__(self, "timing", attrs.evolve(self.timing, extensions=self.options))

    # ------------------------------------------------------------------ building
    @classmethod
    def from_args(cls, args, option_sets=None) -> "RunConfig":
        """The run settings of a parsed command line: the only place that reads one.

        :param option_sets: the extensions' :class:`OptionSet` s; their values are taken (typed)
            from ``args``. None: every other JSON-able entry of ``args`` is kept under owner ``""``.
        """
        given = {} if args is None else dict(vars(args))
        core, timing = {}, {}
        for dest, field in ARGS.items():
            if given.get(dest) is None:
                continue
            section, _, name = field.rpartition(".")
            (timing if section else core)[name] = given[dest]
        if "dtypes" in core:
            dtypes = _split_dtypes(core["dtypes"])
            if not dtypes:
                raise UsageError(f"--dtype {','.join(core['dtypes'])!r}: names no dtype (e.g. --dtype float16,bfloat16)")
            core["dtypes"] = dtypes
        if option_sets is None:
            from .records import is_jsonable

            loose = {k: v for k, v in given.items() if k not in ARGS and k not in NOT_SETTINGS and is_jsonable(v)}
            options = ExtensionOptions({"": loose} if loose else {})
        else:
            options = ExtensionOptions({s.owner: {o.dest: given.get(o.dest, o.default) for o in s.options}
                                        for s in option_sets}).bound(option_sets, as_json=True)
        return cls(**core, timing=TimingBudget(**timing), options=options)

    def with_changes(self, **changes) -> "RunConfig":
        """A copy with fields changed; TimingBudget field names change the budget."""
        budget = {k: changes.pop(k) for k in list(changes) if k in attrs.fields_dict(TimingBudget)}
        if budget:
            changes["timing"] = self.timing.with_changes(**budget)
        return attrs.evolve(self, **changes)

    def with_options(self, values: Mapping) -> "RunConfig":
        """A copy with extension option values set: ``{owner: {dest: value}}`` (see
        :func:`owned_options`); the other values are kept."""
        merged = {o: dict(d) for o, d in self.options.values.items()}
        for owner, owned in values.items():
            merged.setdefault(owner, {}).update(owned)
        return attrs.evolve(self, options=ExtensionOptions(merged))

    def selecting(self, names) -> "RunConfig":
        """A copy whose run also selects the extensions ``names`` (``--ext``)."""
        names = tuple(n for n in names if n not in (self.ext or ()))
        if not names:
            return self
        no_ext = tuple(n for n in self.no_ext or () if n not in names) or None
        return attrs.evolve(self, ext=(*(self.ext or ()), *names), no_ext=no_ext)

    def bound(self, option_sets) -> "RunConfig":
        """The same config with its extension options checked against ``option_sets``."""
        return attrs.evolve(self, options=self.options.bound(option_sets, as_json=True))

    def check(self) -> None:
        """One-line refusals of settings that no run can use (before anything is created): the
        one place each run setting is checked."""
        for field, (flag, number) in NUMBERS.items():
            section, _, name = field.rpartition(".")
            number.check(getattr(self.timing if section else self, name), flag)
        if self.gpus is not None:
            parse_gpus(self.gpus)
        if self.timing.max_noise is not None and self.timing.iters is not None:
            raise UsageError("--max-noise stops sampling on noise and --iters fixes the calls: give one of them")

    # ------------------------------------------------------------------ the command line's view
    def namespace(self, base=None) -> argparse.Namespace:
        """The parsed command line this config stands for (``base``'s own entries kept): what
        ``session.options`` / ``run.options`` are for code that reads a namespace."""
        ns = argparse.Namespace(**vars(base)) if base is not None else argparse.Namespace()
        for dest, field in ARGS.items():
            section, _, name = field.rpartition(".")
            value = getattr(self.timing if section else self, name)
            if dest in ("ops", "dtype"):
                value = list(value) if value or dest == "ops" else None
            elif dest in ("ext", "no_ext") and value is not None:
                value = list(value)
            setattr(ns, dest, value)
        for name, value in self.options.flat().items():
            setattr(ns, name, _thawed(value))
        return ns

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict:
        data = {"format": FORMAT}
        for f in attrs.fields(RunConfig):
            value = getattr(self, f.name)
            data[f.name] = value.to_json() if hasattr(value, "to_json") else _thawed(value)
        return data

    @classmethod
    def from_json(cls, data: Mapping, source: str = "config") -> "RunConfig":
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
        data = dict(data)
        version = data.pop("format", FORMAT)
        if version != FORMAT:
            raise ConfigError(f"{source}: format {version!r} is not {FORMAT}")
        _known(data, attrs.fields_dict(RunConfig), source)
        timing = dict(data.pop("timing", {}) or {})
        _known(timing, {k for k in attrs.fields_dict(TimingBudget) if k != "extensions"}, f"{source}: timing")
        options = data.pop("options", {}) or {}
        if not isinstance(options, Mapping) or not all(isinstance(v, Mapping) for v in options.values()):
            raise ConfigError(f"{source}: options: expected {{extension: {{option: value}}}}")
        try:
            return cls(**data, timing=TimingBudget(**timing), options=ExtensionOptions(options))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: {exc}") from exc

    def write(self, path) -> Path:
        from .rundir import write_atomic

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, path) -> "RunConfig":
        from . import readers

        path = Path(path)
        try:  # a regular file, bounded, strict JSON (no NaN, numbers in range): one line if not
            data = readers.read_json(path, limit=readers.LIMITS["config"], what="config file")
        except OSError as exc:
            raise ConfigError(f"config {path}: {exc.strerror or exc}") from exc
        except readers.BadFile as exc:
            raise ConfigError(f"config {exc}") from None
        return cls.from_json(data, source=f"config {path}")


def owned_options(values: Mapping, option_sets, what: str = "option") -> dict:
    """``{dest: value}`` as ``{owner: {dest: value}}``: each option under the extension that
    declared it (:class:`ConfigError` for an option no active extension declared)."""
    out: dict = {}
    for dest, value in values.items():
        owner = next((s.owner for s in option_sets if s.get(dest) is not None), None)
        if owner is None:
            raise ConfigError(f"{what} {dest!r} is not declared by an active extension")
        out.setdefault(owner, {})[dest] = value
    return out


def _known(data: Mapping, fields, source: str) -> None:
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{source}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                          f"(known: {', '.join(sorted(fields))})")


def parse_gpus(text: Optional[str]) -> list:
    """``"0,1,3"`` -> ``["0", "1", "3"]`` (labels, as the visible-devices variable takes them)."""
    if text is None:
        return []
    gpus = [g.strip() for g in str(text).split(",") if g.strip()]
    if not gpus:
        raise UsageError(f"--gpus {text!r}: expected a list such as 0,1,2,3")
    for g in gpus:  # what a visible-devices variable takes: an index, or a GPU / MIG uuid
        if not re.fullmatch(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+", g):
            raise UsageError(f"--gpus {text!r}: {g!r} is not a GPU index (or GPU-/MIG- uuid); expected e.g. 0,1,2,3")
    if len(set(gpus)) != len(gpus):
        raise UsageError(f"--gpus {text!r}: a GPU is listed twice")
    return gpus
