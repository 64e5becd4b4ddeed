"""Hooks of the ``profile`` extension.

- every run: each point's record gets the kernels its checked call launched (``launches``);
- ``zlf profile RUN_OR_OP POINT...``: the point's kernels under Nsight Compute, in a fresh process;
- ``zlf triage CAMPAIGN [POINT...]`` and ``zlf ab ... --triage``: a bundle per decided point;
- inside a process ``zlf profile`` started (``ZLF_PROFILE_POINT``): profiling around that point's calls.

One instance per invocation (the entry point is this class).
"""
from __future__ import annotations

from zlf import hookimpl

from .child import ProfiledPoint
from .launches import KEY, LaunchRecorder


class ProfilePlugin:
    def __init__(self):
        self.recorder = LaunchRecorder()
        self.child = None

    # ------------------------------------------------------------------ command line
    @hookimpl
    def add_commands(self, subparsers):
        from zlf.commands import add_module_command

        from . import profile, triage

        add_module_command(subparsers, "profile", profile, "profile a point's kernels under Nsight Compute "
                           "(counters, occupancy, registers)", epilog=profile.EPILOG)
        add_module_command(subparsers, "triage", triage, "explain an A/B campaign's verdicts: config, IR diff, "
                           "counters, env, repro", epilog=triage.EPILOG)

    @hookimpl
    def add_campaign_options(self, parser):
        from .triage import add_campaign_options

        add_campaign_options(parser)

    @hookimpl
    def after_campaign(self, campaign, results, options, session):
        if options.campaign.get("triage"):
            from .triage import after_campaign

            after_campaign(campaign, results, options, session)

    # ------------------------------------------------------------------ runs
    @hookimpl
    def before_run(self, run):
        self.child = ProfiledPoint.from_environment()
        if self.child is not None:
            run.meta["profile"] = {"point": self.child.point_id, "calls": self.child.calls}

    @hookimpl
    def before_point(self, run, point):
        self.recorder.reset()
        if self.child is not None and point.id == self.child.point_id:
            self.child.begin(run.current_op, run.backend)

    @hookimpl
    def on_launch(self, event):
        self.recorder.add(event)
        if self.child is not None:
            self.child.launched(event)

    @hookimpl
    def after_point(self, run, point, record):
        launches = self.recorder.to_json()
        if launches:
            run.annotate(KEY, launches)
        self.recorder.reset()
        if self.child is not None and point.id == self.child.point_id:
            run.annotate("profiled", self.child.end())
