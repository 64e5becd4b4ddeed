"""Terminal output: colour only on a TTY and never with NO_COLOR; progress on long work."""
from __future__ import annotations

import os
import re
import sys
from typing import Optional

_COLOURS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


#: C0 and C1 control characters, DEL, and the bidirectional overrides that reorder what a
#: terminal shows: a point id or an error read from a record must not drive the terminal.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(value):
    """``value`` with every control character written as an escape (``\\x1b``); anything that
    is not a string is returned unchanged. Use it on every string from records (point ids,
    errors, markers, meta.json values) before it is printed or put in a markdown page."""
    if not isinstance(value, str):
        return value
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", value)


#: a cell a spreadsheet would read as a formula (OWASP's CSV-injection rule: ``=``, ``+``, ``-``,
#: ``@``, a tab or a carriage return first); a number keeps its sign.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\\x09", "\\x0d")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|nan)$", re.I)


def csv_cell(value):
    """One CSV cell from a record: control characters escaped (:func:`clean`), and a text a
    spreadsheet would run as a formula prefixed with ``'`` (``=HYPERLINK(...)`` reads
    ``'=HYPERLINK(...)``); numbers, negative ones too, stay numbers; None is empty."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = clean(str(value))
    if text.lstrip(" ").startswith(_FORMULA_START) and not _NUMBER.match(text.strip()):
        return "'" + text
    return text


def csv_text(fields, rows) -> str:
    """``rows`` under the header ``fields`` as CSV, every cell through :func:`csv_cell`: the one
    CSV writer of zlf's tables."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_cell(f) for f in fields])
    w.writerows([[csv_cell(v) for v in row] for row in rows])
    return buf.getvalue()


#: what a markdown page must not take from a record as it is: a pipe ends a table cell, a
#: backtick opens code, brackets make a link or an image, and ``<``, ``>``, ``&`` make HTML
#: (``</details><script>``) or an entity.
_MARKDOWN = re.compile(r"[\\|`\[\]<>&]")
_MARKDOWN_AS = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def md_cell(value) -> str:
    """``value`` (text from a record: an error, a device name, an op name) as markdown shows it
    and nothing more: control characters escaped (:func:`clean`), line breaks a space, and the
    markdown / HTML syntax characters escaped (``\\|``, ``&lt;`` ...). None is empty."""
    if value is None:
        return ""
    text = clean(str(value).replace("\r\n", " ").replace("\n", " "))
    return _MARKDOWN.sub(lambda m: _MARKDOWN_AS.get(m.group(), "\\" + m.group()), text)


def md_table(rows, headers, **kwargs) -> str:
    """A markdown (GitHub) table of record values, every cell and header through :func:`md_cell`:
    the one way a page puts record text into a table."""
    from tabulate import tabulate

    return tabulate([[md_cell(c) for c in row] for row in rows], headers=[md_cell(h) for h in headers],
                    tablefmt="github", disable_numparse=True, **kwargs)


def clean_lines(text: str) -> str:
    """:func:`clean` applied line by line: a multi-line block (a table, a page) keeps its line
    breaks; only for text that holds no colour of ours."""
    return "\n".join(clean(line) for line in text.split("\n"))


def clean_rows(rows) -> list:
    """Table rows (lists of cells) with :func:`clean` applied to every cell."""
    return [[clean(cell) for cell in row] for row in rows]


def number(value, digits: int = 4, missing: str = "") -> str:
    """``value`` to ``digits`` significant digits (``0.01234``, ``1.235e+04``); ``missing`` for None.
    The one way tables write measured numbers (ms, GB/s, TFLOP/s)."""
    return missing if value is None else f"{value:.{digits}g}"


def percent(value, digits: int = 1, sign: bool = False, missing: str = "", limit: Optional[float] = None) -> str:
    """``value`` percent with ``digits`` decimals (``+2.5%`` with ``sign``); ``missing`` for None.
    Beyond ``limit`` (an absurd interval width) two significant digits keep the cell short."""
    if value is None:
        return missing
    plus = "+" if sign else ""
    if limit is not None and abs(value) >= limit:
        return f"{value:{plus}.2g}%"
    return f"{value:{plus}.{digits}f}%"


#: the fields of ``zlf run``'s summary, in every format (the names of results.jsonl)
RUN_FIELDS = ("point", "status", "timer", "median_ms", "gbps", "tflops", "note")
#: a failure shared by more points than this is one row of the table, with its count
COLLAPSE_AT = 3


def _record_row(r, colour: bool) -> list:
    status = paint(r.status, status_colour(r.status)) if colour else r.status
    note = r.error or ("; ".join(m.split(" ")[0] for m in r.markers) if r.markers else "")
    if getattr(r, "unchecked", None):  # --check warn: timed although its reference check failed
        note = f"UNCHECKED: {r.unchecked}" + (f"; {note}" if note else "")
    # a point that did not fit reads OOM where its numbers would be
    numbers = ["OOM"] * 3 if r.status == "OOM" else [number(r.median_ms), number(r.gbps), number(r.tflops)]
    return [clean(r.point), status, clean(r.timer or ""), *numbers, clean(note[:80])]


def results_table(records, colour: bool = True, fmt: str = "table") -> str:
    """The summary ``zlf run`` prints, in ``fmt`` (table, markdown, csv; json is the records
    themselves). In a table or markdown, points that FAILED with one and the same error are one
    row (``POINT and N more``); csv lists every point."""
    from tabulate import tabulate

    if fmt == "csv":
        rows = []
        for r in records:
            note = r.error or " ".join(m.split(" ")[0] for m in r.markers)
            if getattr(r, "unchecked", None):
                note = f"UNCHECKED: {r.unchecked}" + (f"; {note}" if note else "")
            rows.append([r.point, r.status, r.timer, r.median_ms, r.gbps, r.tflops, note])
        return csv_text(RUN_FIELDS, rows).rstrip("\n")
    groups = {}
    for r in records:
        if r.status == "FAILED":
            groups.setdefault(failure_key(r.error or ""), []).append(r.point)
    collapsed = {p: (key, len(pts)) for key, pts in groups.items() if len(pts) > COLLAPSE_AT for p in pts}
    rows, shown = [], set()
    for r in records:
        group = collapsed.get(r.point)
        if group is None or group[0] not in shown:
            row = _record_row(r, colour)
            if group is not None:
                shown.add(group[0])
                row[0] = f"{row[0]} and {group[1] - 1} more"
            rows.append(row)
    if fmt == "markdown":
        return md_table(rows, RUN_FIELDS)
    return tabulate(rows, headers=list(RUN_FIELDS), tablefmt="simple", disable_numparse=True)


def failure_key(error: str) -> str:
    """What makes two FAILED points' errors the same failure: the first line, addresses masked."""
    first = error.strip().splitlines()[0] if error.strip() else ""
    return re.sub(r"0x[0-9a-f]+", "0x…", first)


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


class StatusLine:
    """One line on a terminal that says what is happening now, rewritten in place (a carriage
    return and spaces: no escape codes); silent where stderr is not a terminal (logs, pipes) or
    with ZLF_NO_PROGRESS. Phase words are coloured only where :func:`use_colour` allows."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.on = hasattr(self.stream, "isatty") and self.stream.isatty() and os.environ.get("ZLF_NO_PROGRESS") is None
        self._width = 0

    def show(self, text: str) -> None:
        """Replace the line with ``text`` (cleaned by the caller: it is written as given)."""
        if not self.on:
            return
        text = text[:max(20, _columns() - 1)]
        self.stream.write("\r" + text + " " * max(0, self._width - len(text)))
        self.stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        if self.on and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


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
            self.bar.set_postfix_str(clean(label[-40:]), refresh=False)
            self.bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {clean(label)} {clean(outcome)}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
