"""Terminal output: colour only on a TTY and never with NO_COLOR; progress on long work."""
from __future__ import annotations

import os
import sys

_COLOURS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


def use_colour(stream=None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") is not None:  # any value, even empty, per no-color.org
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def paint(text: str, colour: str, stream=None) -> str:
    if not use_colour(stream):
        return text
    return f"\033[{_COLOURS[colour]}m{text}\033[0m"


def status_colour(status: str) -> str:
    return {"ok": "green", "FAILED": "red", "OOM": "yellow"}.get(status, "dim")


def warn(message: str) -> None:
    print(paint(f"zlf: warning: {message}", "yellow", sys.stderr), file=sys.stderr)


class Progress:
    """A tqdm bar on a terminal; one plain line per item otherwise (CI logs, pipes)."""

    def __init__(self, total: int, desc: str = "points"):
        self.total = total
        self.done = 0
        self.bar = None
        if sys.stderr.isatty() and os.environ.get("ZLF_NO_PROGRESS") is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="pt", leave=False, dynamic_ncols=True)

    def step(self, label: str, outcome: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label[-40:], refresh=False)
            self.bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {label} {outcome}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
