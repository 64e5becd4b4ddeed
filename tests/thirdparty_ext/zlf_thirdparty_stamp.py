"""A third-party extension core has never heard of: a replay-like "stamp".

Round 1's A run of a campaign writes ``stamp/stamp.txt`` (a fresh token) into its run directory;
every other run of the op gets ``stamp_from`` (its ``--stamp-from``) set to that run in its run
configuration, and records the token it read in
meta.json. It takes part in ``zlf ab`` only through the ``campaigns`` hooks, as an extension
shipped by someone else would (tests/test_thirdparty_campaign.py installs it by an entry point).
"""
from __future__ import annotations

import uuid
from pathlib import Path

from zlf import UsageError, hookimpl
from zlf.ab.extending import SOURCE, RunNeed

STAMP_DIR = "stamp"
CONTEXT = "stamp: round 1 A writes a stamp, every other run reads it (--stamp-from)"


class StampExtension:
    # ------------------------------------------------------------------ every run
    @hookimpl
    def add_options(self, parser):
        g = parser.add_argument_group("stamp (third-party test extension)")
        g.add_argument("--stamp-from", metavar="RUN_DIR", help="read the stamp RUN_DIR wrote instead of writing one")

    @hookimpl
    def before_run(self, run):
        source = getattr(run.options, "stamp_from", None)
        if source:
            token = (Path(source) / STAMP_DIR / "stamp.txt").read_text().strip()
            run.meta["stamp"] = {"mode": "read", "token": token, "source": str(source)}
            return
        token = uuid.uuid4().hex
        (run.dir / STAMP_DIR).mkdir(parents=True, exist_ok=True)
        (run.dir / STAMP_DIR / "stamp.txt").write_text(token + "\n")
        run.meta["stamp"] = {"mode": "wrote", "token": token}

    # ------------------------------------------------------------------ zlf ab campaigns
    @hookimpl
    def campaign_setup(self, plan, options, session):
        if options.run.options.get("stamp_from"):
            raise UsageError("--stamp-from is set by the campaign (round 1 A writes, every other run reads)")
        plan.data["stamp"] = {"writer": "r1_A"}

    @hookimpl
    def campaign_run_needs(self, campaign, op, round, side):
        if not campaign.data.get("stamp") or (round, side) == (1, "A"):
            return []
        return [RunNeed(options={"stamp_from": SOURCE}, round=1, side="A", path=STAMP_DIR)]

    @hookimpl
    def campaign_context(self, data):
        return [CONTEXT] if data.get("stamp") else []
