"""Finding, selecting, loading and calling extensions.

One fresh :class:`pluggy.PluginManager` per invocation (no module-global manager). Disabled
extensions are blocked *before* their entry point is imported, so a broken extension can always
be switched off with ``--no-ext NAME``.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
from typing import Iterable, Optional

import attrs
import pluggy

from . import hookspecs
from .errors import ExtensionError, UsageError
from .hookspecs import NAME

ENTRY_POINT_GROUP = NAME
CORE_PLUGIN = "core"
#: core's own plugins (name -> module), registered before any extension, as pytest and llm
#: register theirs: the defaults of every hook, and the built-in commands.
DEFAULT_PLUGINS = {CORE_PLUGIN: "zlf.defaults", "core.commands": "zlf.commands"}


def exclusive_hooks(pm) -> dict:
    """``{hook: its hookspecs.Exclusive}`` of every hookspec marked exclusive
    (:func:`zlf.hookspecs._exclusive`)."""
    found = {}
    for name, caller in vars(pm.hook).items():
        spec = getattr(caller, "spec", None)
        if spec is not None and hasattr(spec.function, hookspecs.EXCLUSIVE):
            found[name] = getattr(spec.function, hookspecs.EXCLUSIVE)
    return found


@attrs.frozen
class ExtensionInfo:
    """What ``zlf plugins`` reports about one installed extension."""

    name: str
    distribution: str
    version: str
    status: str  # active | disabled | inactive | broken
    hooks: Optional[tuple] = None
    error: Optional[str] = None
    value: str = ""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "hooks": list(self.hooks) if self.hooks is not None else None,
            "error": self.error,
            "entry_point": self.value,
        }


def installed_extensions() -> dict:
    """Entry points of group ``zlf`` by name (the first distribution wins on a duplicate)."""
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return dict(sorted(found.items()))


def _dist_of(ep) -> tuple:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ("?", "?")
    return (dist.metadata["Name"] or "?", dist.version or "?")


def _split_names(values: Iterable[str]) -> list:
    names = []
    for v in values or ():
        names.extend(n.strip() for n in v.split(",") if n.strip())
    return names


@attrs.frozen
class Selection:
    """Which extensions the user asked for: ``only`` (None = all installed) minus ``disabled``."""

    only: Optional[tuple] = None
    disabled: tuple = ()

    @classmethod
    def from_args(cls, ext=None, no_ext=None, environ=None) -> "Selection":
        environ = os.environ if environ is None else environ
        only = _split_names(ext) or _split_names([environ.get("ZLF_EXTENSIONS", "")]) or None
        disabled = _split_names(no_ext) + _split_names([environ.get("ZLF_DISABLE", "")])
        return cls(tuple(only) if only is not None else None, tuple(dict.fromkeys(disabled)))


def _implemented_hooks(pm, plugin) -> tuple:
    return tuple(sorted(hc.name for hc in pm.get_hookcallers(plugin) or ()))


def build_plugin_manager(selection: Selection, extra_plugins=(), tolerant: bool = False):
    """Make a plugin manager with core defaults and the selected extensions.

    :param extra_plugins: ``(name, plugin)`` pairs registered directly (tests, embedding).
    :param tolerant: record broken extensions in the infos instead of raising (``zlf plugins``).
    :return: ``(pm, infos)`` where infos lists every installed extension.
    """
    pm = pluggy.PluginManager(NAME)
    pm.add_hookspecs(hookspecs)
    installed = installed_extensions()
    known = set(installed) | {name for name, _ in extra_plugins}
    for label, names in (("--ext/ZLF_EXTENSIONS", selection.only or ()), ("--no-ext/ZLF_DISABLE", selection.disabled)):
        unknown = [n for n in names if n not in known]
        if unknown:
            listing = ", ".join(sorted(known)) or "none"
            raise UsageError(f"unknown extension {', '.join(map(repr, unknown))} in {label}; installed: {listing}")

    for name in selection.disabled:
        pm.set_blocked(name)  # before import: a disabled broken extension is never touched
    for name, module in DEFAULT_PLUGINS.items():
        pm.register(importlib.import_module(module), name=name)

    infos = []
    wanted = set(selection.only) if selection.only is not None else None
    for name, ep in installed.items():
        dist, version = _dist_of(ep)
        base = dict(name=name, distribution=dist, version=version, value=ep.value)
        if name in selection.disabled:
            infos.append(ExtensionInfo(status="disabled", **base))
            continue
        if wanted is not None and name not in wanted:
            infos.append(ExtensionInfo(status="inactive", **base))
            continue
        try:
            plugin = ep.load()
            if inspect.isclass(plugin):
                plugin = plugin()
            pm.register(plugin, name=name)
        except Exception as exc:  # any failure of third-party code is reported, not raised raw
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            if not tolerant:
                raise ExtensionError(
                    f"extension {name!r} (entry point {name} = {ep.value}, distribution {dist} {version}) "
                    f"failed to load: {error} -- run with --no-ext {name} to go on without it"
                ) from exc
            infos.append(ExtensionInfo(status="broken", error=error, **base))
            continue
        infos.append(ExtensionInfo(status="active", hooks=_implemented_hooks(pm, plugin), **base))

    for name, plugin in extra_plugins:
        if name in selection.disabled or (wanted is not None and name not in wanted):
            continue
        pm.register(plugin, name=name)

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        culprit = pm.get_name(exc.plugin) or "?"
        raise ExtensionError(
            f"extension {culprit!r} implements an unknown hook: {exc} -- run with --no-ext {culprit} to go on without it"
        ) from exc
    return pm, infos


class Hooks:
    """The one place core calls hooks, keyword arguments only, one typed method per hook core
    calls (``hooks.before_run(run=run)`` reads as ``pm.hook.before_run(run=run)`` does); the
    one provider of an exclusive hook is chosen here (:meth:`caller`)."""

    def __init__(self, pm: pluggy.PluginManager, infos=(), preferred: Optional[dict] = None):
        self.pm = pm
        self.infos = list(infos)
        self._preferred = dict(preferred or {})
        self._exclusive = exclusive_hooks(pm)
        self._callers = {}
        self._kernel_timers = {}
        #: the extensions' declared options (:class:`zlf.config.OptionSet`), known once ``add_options`` ran
        self.option_sets: tuple = ()
        #: the extensions' ``add_campaign_options``, typed (one OptionSet per extension)
        self.campaign_option_sets: tuple = ()

    def choose(self, option: str, name: Optional[str]) -> None:
        """``option`` (:data:`zlf.hookspecs.TIMER`) picks provider ``name`` of every exclusive
        hook it chooses; None: no choice (a second provider is an error)."""
        for hook, mark in self._exclusive.items():
            if mark.chosen_by == option:
                if name:
                    self._preferred[hook] = name
                else:
                    self._preferred.pop(hook, None)
                self._callers.pop(hook, None)

    def caller(self, name: str):
        """The caller of hook ``name``: its only provider when the spec is exclusive."""
        return self._caller(name) if name in self._exclusive else getattr(self.pm.hook, name)

    def check_exclusive(self) -> None:
        """Raise now if two extensions race for an exclusive hook. Commands that start runs call
        this before anything is written; others (``plugins``, ``compare``) never need to."""
        for hook in self._exclusive:
            self._caller(hook)

    def _caller(self, hook: str):
        if hook not in self._callers:
            self._callers[hook] = self._exclusive_caller(hook, self._preferred.get(hook))
        return self._callers[hook]

    def _providers(self, hook: str) -> list:
        return [impl.plugin_name for impl in getattr(self.pm.hook, hook).get_hookimpls()
                if impl.plugin_name not in DEFAULT_PLUGINS]

    def _distribution(self, plugin_name: str) -> str:
        for info in self.infos:
            if info.name == plugin_name:
                return f"{info.distribution} {info.version}"
        return "registered directly"

    def _exclusive_caller(self, hook: str, preferred: Optional[str]):
        providers = self._providers(hook)
        mark = self._exclusive[hook]
        option = mark.chosen_by
        if preferred and preferred not in providers and preferred != CORE_PLUGIN and option:
            # the option picks between several hooks (--timer: a time_fn or a kernel timer)
            others = {h: self._providers(h) for h, m in self._exclusive.items() if m.chosen_by == option}
            if not any(preferred in p for p in others.values()):
                listing = "; ".join(f"{h}: {', '.join(p) or 'none'}" for h, p in others.items())
                raise UsageError(f"no active extension named {preferred!r} implements a timer ({listing})")
            # --timer names another hook's provider: core's own (time_fn: core's timer times every
            # point with the chosen kernel timer), or the usual choice (kernel_timer)
            preferred = CORE_PLUGIN if mark.core_when_other else None
        if preferred:
            if preferred not in providers and preferred != CORE_PLUGIN:
                raise UsageError(f"no active extension named {preferred!r} implements {hook}; providers: {', '.join(providers) or 'none'}")
            drop = [self.pm.get_plugin(p) for p in providers if p != preferred]
            return self.pm.subset_hook_caller(hook, remove_plugins=drop)
        if len(providers) > 1:
            names = " and ".join(f"{p!r} ({self._distribution(p)})" for p in providers)
            choose = f" (choose one with {option} NAME)" if option else ""
            raise ExtensionError(
                f"two active extensions implement {hook}: {names}; keep one with --no-ext NAME{choose}"
            )
        return getattr(self.pm.hook, hook)

    def implemented(self, hook: str) -> bool:
        """Whether any plugin other than core's own implements ``hook``."""
        return bool(self._providers(hook))

    # ------------------------------------------------------------------ the command line
    def add_commands(self, subparsers) -> None:
        self.pm.hook.add_commands(subparsers=subparsers)

    def add_options(self, parser, command: str = "run", traits=None):
        """Every extension's options that apply to a command that does ``traits`` (None: what
        ``zlf run`` does) on ``parser``; remembers them as typed option sets (over every command
        built so far) and returns the arguments added."""
        from .config import declare, merged_option_sets, option_sets_of
        from .options import RUN_TRAITS

        declared = declare(self.pm, parser, command, RUN_TRAITS if traits is None else traits)
        self.option_sets = merged_option_sets(self.option_sets, option_sets_of(declared))
        return [action for _, added in declared for action, _ in added]

    def add_campaign_options(self, parser) -> None:
        """Every extension's campaign options (``zlf ab``'s own, never its runs') on ``parser``;
        remembers them as typed option sets (:attr:`campaign_option_sets`), read into
        :class:`zlf.ab.extending.CampaignOptions`."""
        from .config import declare, merged_option_sets, option_sets_of

        declared = declare(self.pm, parser, hook="add_campaign_options")
        self.campaign_option_sets = merged_option_sets(self.campaign_option_sets, option_sets_of(declared))

    def configure(self, session) -> None:
        self.pm.hook.configure(session=session)

    # ------------------------------------------------------------------ backends and ops
    def register_backends(self) -> list:
        return [b for group in self.pm.hook.register_backends() for b in (group or ())]

    def resolve_ops(self, spec, session):
        return self.pm.hook.resolve_ops(spec=spec, session=session)

    def op_shapes(self, op, shapes, session):
        return self.caller("op_shapes")(op=op, shapes=shapes, session=session)

    def env_prefixes(self) -> tuple:
        """Every active plugin's environment prefixes, core's included, once each."""
        return tuple(dict.fromkeys(p for group in self.pm.hook.env_prefixes() for p in (group or ())))

    # ------------------------------------------------------------------ run lifecycle
    def before_run(self, run) -> None:
        self.pm.hook.before_run(run=run)

    def before_point(self, run, point) -> None:
        self.pm.hook.before_point(run=run, point=point)

    def after_point(self, run, point, record) -> None:
        self.pm.hook.after_point(run=run, point=point, record=record)

    def after_run(self, run, results) -> None:
        self.pm.hook.after_run(run=run, results=results)

    def kernel_timer(self, backend, options):
        """The kernel-activity timer offered for ``backend`` (asked once per backend), or None."""
        if backend not in self._kernel_timers:
            self._kernel_timers[backend] = self.caller("kernel_timer")(backend=backend, options=options)
        return self._kernel_timers[backend]

    def time_fn(self, fn, point, backend, options, op=None, inputs=None, call_on=None):
        """Time ``fn`` with the chosen timer, offering it the backend's kernel timer."""
        # --timer core: core's event timer, whatever kernel timer is on offer
        kernel = None if self._preferred.get("time_fn") == CORE_PLUGIN else self.kernel_timer(backend, options)
        return self.caller("time_fn")(fn=fn, point=point, backend=backend, options=options, op=op, inputs=inputs,
                                     kernel_timer=kernel, call_on=call_on)

    # ------------------------------------------------------------------ campaigns
    def campaign_setup(self, plan, options, session) -> None:
        """``options``: :class:`zlf.ab.extending.CampaignOptions`."""
        self.pm.hook.campaign_setup(plan=plan, options=options, session=session)

    def after_campaign(self, campaign, results, options, session) -> None:
        self.pm.hook.after_campaign(campaign=campaign, results=results, options=options, session=session)

    def campaign_run_needs(self, campaign, op, round, side) -> list:
        return [n for group in self.pm.hook.campaign_run_needs(campaign=campaign, op=op, round=round, side=side)
                for n in (group or ())]

    def campaign_context(self, data) -> list:
        return [line for group in self.pm.hook.campaign_context(data=data) for line in (group or ())]

    def campaign_guards(self, campaign, ops) -> list:
        return [line for group in self.pm.hook.campaign_guards(campaign=campaign, ops=ops) for line in (group or ())]

    def campaign_split_item(self, item, dest, shapes, link) -> bool:
        return bool(self.pm.hook.campaign_split_item(item=item, dest=dest, shapes=shapes, link=link))

    def ir_status(self, a_dir, b_dir):
        return self.pm.hook.ir_status(a_dir=a_dir, b_dir=b_dir)

    # ------------------------------------------------------------------ the compiler
    def on_compile(self, event) -> None:
        self.pm.hook.on_compile(event=event)

    def on_launch(self, event) -> None:
        self.pm.hook.on_launch(event=event)
