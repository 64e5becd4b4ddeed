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
    """``{hook: option that picks a provider ("" for none)}`` of every hookspec marked
    exclusive (:func:`zlf.hookspecs._exclusive`)."""
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
    """The one place core calls hooks, keyword arguments only: :meth:`call` calls any hook,
    choosing the one provider of an exclusive hook; ``hooks.NAME(...)`` is the same call
    (positional arguments in the hookspec's order). Only hooks core adds to have methods."""

    def __init__(self, pm: pluggy.PluginManager, infos=(), preferred: Optional[dict] = None):
        self.pm = pm
        self.infos = list(infos)
        self._preferred = dict(preferred or {})
        self._exclusive = exclusive_hooks(pm)
        self._callers = {}
        self._kernel_timers = {}
        #: the extensions' declared options (:class:`zlf.config.OptionSet`), known once ``add_options`` ran
        self.option_sets: tuple = ()

    def call(self, hook: str, **kwargs):
        """Call ``hook``: its only provider when the spec is exclusive, else every implementation."""
        caller = self._caller(hook) if hook in self._exclusive else getattr(self.pm.hook, hook)
        return caller(**kwargs)

    def __getattr__(self, hook: str):
        spec = getattr(getattr(self.__dict__.get("pm"), "hook", None), hook, None)
        if hook.startswith("_") or getattr(spec, "spec", None) is None:
            raise AttributeError(hook)
        argnames = spec.spec.argnames

        def call(*args, **kwargs):
            return self.call(hook, **dict(zip(argnames, args)), **kwargs)

        call.__name__ = hook
        return call

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
        option = self._exclusive.get(hook, "")
        if preferred and preferred not in providers and preferred != CORE_PLUGIN and option:
            # the option picks between several hooks (--timer: a time_fn or a kernel timer)
            others = {h: self._providers(h) for h, o in self._exclusive.items() if o == option}
            if not any(preferred in p for p in others.values()):
                listing = "; ".join(f"{h}: {', '.join(p) or 'none'}" for h, p in others.items())
                raise UsageError(f"no active extension named {preferred!r} implements a timer ({listing})")
            if hook == "time_fn":
                # --timer names a kernel-activity timer: core's time_fn times every point with it
                preferred = CORE_PLUGIN
            else:
                preferred = None  # --timer names a time_fn; the kernel timer is chosen as usual
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

    def add_options(self, parser, command: str = "run"):
        """Every extension's options that apply to ``command`` on ``parser``; remembers them as
        typed option sets (over every command built so far) and returns the arguments added."""
        from .config import declare, merged_option_sets, option_sets_of

        declared = declare(self.pm, parser, command)
        self.option_sets = merged_option_sets(self.option_sets, option_sets_of(declared))
        return [action for _, added in declared for action, _ in added]

    # hooks whose results core combines or completes
    def register_backends(self) -> list:
        return [b for group in self.call("register_backends") for b in (group or ())]

    def env_prefixes(self) -> tuple:
        """Every active plugin's environment prefixes, core's included, once each."""
        return tuple(dict.fromkeys(p for group in self.call("env_prefixes") for p in (group or ())))

    def kernel_timer(self, backend, options):
        """The kernel-activity timer offered for ``backend`` (asked once per backend), or None."""
        if backend not in self._kernel_timers:
            self._kernel_timers[backend] = self.call("kernel_timer", backend=backend, options=options)
        return self._kernel_timers[backend]

    def time_fn(self, fn, point, backend, options, op=None, inputs=None, call_on=None):
        """Time ``fn`` with the chosen timer, offering it the backend's kernel timer."""
        # --timer core: core's event timer, whatever kernel timer is on offer
        kernel = None if self._preferred.get("time_fn") == CORE_PLUGIN else self.kernel_timer(backend, options)
        return self.call("time_fn", fn=fn, point=point, backend=backend, options=options, op=op, inputs=inputs,
                         kernel_timer=kernel, call_on=call_on)

    # campaigns: hooks whose answers core gathers into one list
    def campaign_run_needs(self, campaign, op, round, side) -> list:
        return [n for group in self.call("campaign_run_needs", campaign=campaign, op=op, round=round, side=side)
                for n in (group or ())]

    def campaign_context(self, data) -> list:
        return [line for group in self.call("campaign_context", data=data) for line in (group or ())]

    def campaign_guards(self, campaign, ops) -> list:
        return [line for group in self.call("campaign_guards", campaign=campaign, ops=ops) for line in (group or ())]

    def campaign_split_item(self, item, dest, shapes, link) -> bool:
        return bool(self.call("campaign_split_item", item=item, dest=dest, shapes=shapes, link=link))
