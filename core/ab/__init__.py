"""Multi-round A/B campaign: every run a fresh zlf run process; verdicts with a stated error rate.

Modules: :mod:`~zlf.ab.cli` (the command), :mod:`~zlf.ab.sides` (the A and B sides and what every
run is given), :mod:`~zlf.ab.campaign` (campaign.json), :mod:`~zlf.ab.layout` (the campaign
directory), :mod:`~zlf.ab.execute` (run specs, starting and filing runs),
:mod:`~zlf.ab.driving` (rounds, the adaptive loop), :mod:`~zlf.ab.analysis` (values and
verdicts), :mod:`~zlf.ab.guards`, :mod:`~zlf.ab.report`, and :mod:`~zlf.ab.extending` (what
the ``campaigns`` hooks hand over). Names are re-exported here lazily.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "cli": ("EPILOG", "add_example", "configure_parser", "main", "scale_options", "DEFAULT_ROUNDS", "DEFAULT_FIRST_LOOK",
            "DEFAULT_MAX_ROUNDS", "UNITS", "TRAITS", "upgrade"),
    "sides": ("build_sides", "side_configs", "selection", "CAMPAIGN_OWN"),
    "campaign": ("Campaign", "OpSpec", "Side", "Statistics", "Look", "Driving", "SIGNED", "file_identity",
                 "identity_change", "key_path", "signing_key"),
    "layout": ("CAMPAIGN", "SUMMARY_LOG", "SUMMARY_JSON", "REPORT", "PLOT", "SHARED", "PER_OP", "SHARED_PROCESS",
               "PENDING", "RUNNING", "OK", "FAILED", "SKIPPED", "C_RUNNING", "C_COMPLETE", "C_INTERRUPTED",
               "split_run_dir", "now"),
    "execute": ("Execution", "CampaignJob", "campaign_units", "device_flags"),
    "driving": ("Printer", "Scaled", "Stopped", "drive", "run_pending"),
    "analysis": ("collect", "analyse", "load_noise", "settings_of", "spending_plan", "look_level", "noise_of"),
    "guards": ("switch_guard", "switch_guard_messages", "default_switch_sources", "find_references",
               "campaign_guards", "busy_backend", "wait_until_idle"),
    "extending": ("RunNeed", "CampaignPlan", "CampaignOptions", "SOURCE"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
