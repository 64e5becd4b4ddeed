"""What ir_dump adds to ``zlf ab`` and ``zlf compare``: the "IR changed" guard of a campaign, the
IR column of a comparison, and the per-shape split of ``ir/`` out of a shared process's run."""
from __future__ import annotations

import shutil
from pathlib import Path

from .irtree import CHANGED, IDENTICAL, IR_DIR, ONLY_A, ONLY_B, shape_status


def ir_status(a_dir, b_dir):
    """``{shape: status}`` when both runs dumped IR, else None."""
    if not ((Path(a_dir) / IR_DIR).is_dir() and (Path(b_dir) / IR_DIR).is_dir()):
        return None
    return shape_status(a_dir, b_dir)


def guard_lines(campaign, ops) -> list:
    """Per op, whether side B's compiled IR differs from side A's (the first round both ran ok)."""
    lines = []
    for op in ops:
        for k in range(1, campaign.planned_rounds() + 1):
            ra, rb = campaign.find(op, k, "A"), campaign.find(op, k, "B")
            if not (ra and rb and ra["status"] == "ok" and rb["status"] == "ok"):
                continue
            status = shape_status(campaign.run_dir(ra), campaign.run_dir(rb))
            if not status:
                break  # no IR dumped
            lines.append(guard_line(op, status, k))
            break
    return lines


def guard_line(op: str, status: dict, round_no: int = 1) -> str:
    """The IR guard's line for one op from ``{shape: identical | changed | only A | only B}``, in
    the words and order of ``zlf ir-diff``'s summary."""
    n = {word: sum(1 for v in status.values() if v == word) for word in (IDENTICAL, CHANGED, ONLY_A, ONLY_B)}
    if n[IDENTICAL] == len(status):
        return (f"!!! {op}: the switch changed NO compiled code -- IR identical on all {len(status)} shapes "
                f"(r{round_no}_A vs r{round_no}_B): any delta is noise, not the compiler change")
    counts = ", ".join(f"{count} {word}" for word, count in n.items())
    return (f"{op}: IR differs between A and B on {len(status) - n[IDENTICAL]} of {len(status)} shapes "
            f"({counts}; r{round_no}_A vs r{round_no}_B)")


def split_ir(item: Path, dest: Path, shapes, link):
    """``ir/<shape>/...`` of a shared process: only this op's shapes (and the files at the top)."""
    if item.name != IR_DIR or not item.is_dir():
        return None
    dest.mkdir()
    for sub in item.iterdir():
        if sub.is_dir() and sub.name in shapes:
            shutil.copytree(sub, dest / sub.name, copy_function=link)
        elif sub.is_file():
            link(sub, dest / sub.name)
    return True
