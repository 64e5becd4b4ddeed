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


def change(delta_pct, digits: int = 1, missing: str = "") -> str:
    """A change of B against A as a reader takes it in: a signed percent while B is within a
    factor of two of A (``+1.0%``, ``-30.0%``), a factor beyond (``386× slower``, ``2.5× faster``)
    where a percent would read ``+3.8e+04%``. Machine formats (csv, json) keep the number."""
    if delta_pct is None:
        return missing
    ratio = 1.0 + delta_pct / 100.0
    if ratio >= 2.0:
        return f"{_factor(ratio)}× slower"
    if 0.0 < ratio <= 0.5:
        return f"{_factor(1.0 / ratio)}× faster"
    return percent(delta_pct, digits, sign=True)


def _factor(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def duration(ms, missing: str = "") -> str:
    """A time in the unit that keeps it short: ``850 ns``, ``17.5 µs``, ``8.24 ms``, ``1.23 s``
    (three significant digits)."""
    if ms is None:
        return missing
    for per_ms, unit in ((1e6, "ns"), (1e3, "µs"), (1.0, "ms")):
        value = float(f"{ms * per_ms:.3g}")
        if abs(value) < 1000:
            return f"{value:g} {unit}"
    return f"{ms / 1e3:.3g} s"


def rate(value, missing: str = "") -> str:
    """A GB/s or TFLOP/s figure for people: three significant digits without an exponent
    (``1,844``, ``3.84``, ``0.0051``), ``<0.001`` below that (a host-timed run's TFLOP/s)."""
    if value is None:
        return missing
    if value == 0:
        return "0"
    if abs(value) < 0.001:
        return "<0.001"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


#: the fields of ``zlf run``'s summary in csv and json (the names of results.jsonl)
RUN_FIELDS = ("point", "status", "timer", "median_ms", "gbps", "tflops", "note")
#: the same columns in the table and markdown people read: times with their unit, rates in GB/s, TFLOP/s
RUN_HEADERS = ("point", "status", "timer", "median", "GB/s", "TFLOP/s", "note")
#: a failure shared by more points than this is one row of the table, with its count
COLLAPSE_AT = 3


def _record_row(r, colour: bool) -> list:
    status = paint(r.status, status_colour(r.status)) if colour else r.status
    note = r.error or ("; ".join(m.split(" ")[0] for m in r.markers) if r.markers else "")
    if getattr(r, "unchecked", None):  # --check warn: timed although its reference check failed
        note = f"UNCHECKED: {r.unchecked}" + (f"; {note}" if note else "")
    # a point that did not fit reads OOM where its numbers would be
    numbers = ["OOM"] * 3 if r.status == "OOM" else [duration(r.median_ms), rate(r.gbps), rate(r.tflops)]
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
    colalign = ("left", "left", "left", "right", "right", "right", "left")
    if fmt == "markdown":
        return md_table(rows, RUN_HEADERS, colalign=colalign)
    return tabulate(rows, headers=list(RUN_HEADERS), tablefmt="simple", disable_numparse=True, colalign=colalign)


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
    say(paint(f"zlf: warning: {message}", "yellow", sys.stderr))


def say(line: str) -> None:
    """A line on stderr; above the progress bar while one is live (the bar is redrawn below it),
    so a warning never lands inside the bar's line."""
    if Progress.live is not None:
        Progress.live.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


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
    """A live tqdm bar on a terminal, one plain line per item otherwise (CI logs, pipes).

    On a terminal each finished item's line, every :func:`warn`, every Python warning and every
    log record of the ``logging`` module print above the bar (tqdm's ``write`` and
    ``logging_redirect_tqdm``), the bar moves on each item, and :meth:`close` removes it, so what
    is printed next (the results table) stands alone."""

    #: the bar on screen now, if any (:func:`say` writes above it)
    live = None

    def __init__(self, total: int, desc: str = "points", stream=None):
        self.total = total
        self.done = 0
        self.bar = None
        self.stream = stream or sys.stderr
        self._restore = []
        if self.stream.isatty() and os.environ.get("ZLF_NO_PROGRESS") is None:
            import warnings

            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            # mininterval 0 and miniters 1: a point takes seconds, so each one redraws the bar
            self.bar = tqdm(total=total, desc=desc, unit="pt", leave=False, dynamic_ncols=True, file=self.stream,
                            mininterval=0, miniters=1)
            Progress.live = self.bar
            shown = warnings.showwarning

            def show_warning(message, category, filename, lineno, file=None, line=None):
                self.bar.write(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"),
                               file=self.stream)

            warnings.showwarning = show_warning
            self._restore.append(lambda: setattr(warnings, "showwarning", shown))
            redirect = logging_redirect_tqdm()
            redirect.__enter__()
            self._restore.append(lambda: redirect.__exit__(None, None, None))

    def step(self, label: str, outcome: str) -> None:
        self.done += 1
        line = f"[{self.done}/{self.total}] {clean(label)} {clean(outcome)}"
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
            self.bar.set_postfix_str(clean(label[-40:]), refresh=False)
            self.bar.update(1)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            Progress.live = None
            while self._restore:
                self._restore.pop()()
