"""A static dashboard of the history: an index and a page per series, charts drawn by matplotlib.

The site needs no server and fetches nothing: charts are inline SVG, the filter is a few lines of
inline script, there are no external links to assets. Every text from the database is HTML-escaped.
The site is written into a fresh folder beside OUT and swapped in whole, so a reader never sees half
of one and no file is written through a link planted in OUT.
"""
from __future__ import annotations

import hashlib
import html
import io
import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path

from zlf.errors import UsageError
from zlf.rundir import replace_dir, safe_name

MARK = ".zlf-history-site"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em;color:#1b1b1b}
table{border-collapse:collapse;margin:.6em 0 1.4em}th,td{border:1px solid #ccc;padding:.25em .55em;text-align:left;font-size:14px}
th{background:#f1f3f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.slower{color:#b00020;font-weight:600}.faster{color:#0b6e2e;font-weight:600}
.filters{display:flex;gap:1em;flex-wrap:wrap;margin:.5em 0 1em}.filters label{font-size:14px}
code,pre{background:#f6f8fa;padding:.1em .3em;border-radius:3px;font-size:13px}pre{padding:.6em;overflow-x:auto}
.empty{color:#666;font-style:italic}
"""

FILTER_JS = """
(function(){
  var op=document.getElementById('f-op'),dt=document.getElementById('f-dtype'),lb=document.getElementById('f-label');
  function apply(){
    var o=op.value.trim().toLowerCase(),d=dt.value,l=lb.value.trim().toLowerCase(),shown=0;
    document.querySelectorAll('tr[data-op]').forEach(function(tr){
      var ok=(!o||tr.dataset.op.toLowerCase().indexOf(o)>=0)&&(!d||tr.dataset.dtype===d)&&
             (!l||tr.dataset.labels.toLowerCase().indexOf(l)>=0);
      tr.style.display=ok?'':'none'; if(ok&&tr.closest('#series'))shown++;
    });
    document.getElementById('shown').textContent=shown;
  }
  [op,dt,lb].forEach(function(e){e.addEventListener('input',apply);e.addEventListener('change',apply);});
  apply();
})();
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def page_name(point: str, env: str, side: str) -> str:
    digest = hashlib.sha256(f"{point}\0{env}\0{side}".encode()).hexdigest()[:10]
    return f"{safe_name(point, 'point')[:80]}-{digest}.html"


def _fmt_pct(v: float) -> str:
    return f"{v:+.2f} %"


def chart_svg(series: dict) -> str:
    """The series as an inline SVG: each run's median, each segment's level, a line at each change."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ys = [r["median_ms"] for r in series["results"]]
    xs = list(range(1, len(ys) + 1))
    fig, ax = plt.subplots(figsize=(8.5, 3.2), dpi=96)
    try:
        ax.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.0, color="#1f5fa8", label="median per run")
        cuts = [0] + [c["change"].index for c in series["changes"]] + [len(ys)]
        for lo, hi in zip(cuts, cuts[1:]):
            seg = ys[lo:hi]
            if seg:
                import math

                level = math.exp(sum(math.log(v) for v in seg) / len(seg))
                ax.hlines(level, lo + 0.6, hi + 0.4, colors="#888", linestyles="--", linewidth=1.0)
        for c in series["changes"]:
            ch = c["change"]
            ax.axvline(ch.index + 0.5, color="#b00020" if ch.ratio > 1 else "#0b6e2e", linewidth=1.6)
            ax.annotate(_fmt_pct(ch.pct), (ch.index + 0.6, max(ys)), fontsize=8, va="top",
                        color="#b00020" if ch.ratio > 1 else "#0b6e2e")
        ax.set_xlabel("run (oldest first)")
        ax.set_ylabel("median ms")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    finally:
        plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _repro(run: dict, sides: dict) -> str:
    env = ""
    side = sides.get(run.get("side") or "")
    if side:  # a name that is no variable name would be shell syntax: left out
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(side.get("env", {}).items())
                       if k.isidentifier() and k.isascii())
    cmd = shlex.join(run["command"]) if run["command"] else "(no command recorded)"
    python = side.get("python") if side else ""
    if python and run["command"] and run["command"][0] == "zlf":
        cmd = f"{shlex.quote(python)} -m zlf " + shlex.join(run["command"][1:])
    return (env + " " + cmd).strip()


def _labels(run: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(run["labels"].items()))


def _head(title: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
            f"<meta name=viewport content='width=device-width, initial-scale=1'>"
            # no icon to fetch: a browser would ask the server for /favicon.ico and log its 404
            f"<link rel=icon href='data:,'><style>{CSS}</style></head><body>")


def point_page(s: dict, sides_by_campaign: dict) -> str:
    title = f"{s['point']} — {s['env_key']}{' side ' + s['side'] if s['side'] else ''}"
    run0 = s["runs"][-1]
    out = [_head(title), f"<p><a href='index.html'>← all series</a></p><h1>{_e(s['point'])}</h1>",
           f"<p>environment <code>{_e(s['env_key'])}</code>: {_e(run0['backend'])}, {_e(run0['device'])}, "
           f"driver {_e(run0['driver'] or '-')}, torch {_e(run0['torch'])}, triton {_e(run0['triton'])}"
           f"{', side ' + _e(s['side']) if s['side'] else ''}; {len(s['results'])} runs</p>",
           f"<figure>{chart_svg(s)}</figure>"]
    out.append("<h2>Changes</h2>")
    if not s["changes"]:
        out.append("<p class=empty>No confirmed change in this series.</p>")
    for c in s["changes"]:
        ch = c["change"]
        cls = "slower" if ch.ratio > 1 else "faster"
        out.append(f"<h3 class={cls}>{_e(_fmt_pct(ch.pct))} at run {ch.index + 1} "
                   f"(interval {_e(_fmt_pct((ch.lo - 1) * 100))} .. {_e(_fmt_pct((ch.hi - 1) * 100))}, "
                   f"p = {ch.p_value:.2g}, {ch.before} runs before, {ch.after} after)</h3>")
        if c["labels"]:
            out.append("<p>labels that changed: " + ", ".join(
                f"<code>{_e(k)}</code> {_e(a)} → {_e(b)}" for k, (a, b) in c["labels"].items()) + "</p>")
        out.append("<table><tr><th></th><th>run</th><th>started</th><th>labels</th><th>repro</th></tr>")
        for which, run in (("last before", c["before"]), ("first after", c["after"])):
            sides = sides_by_campaign.get(run.get("campaign_uid") or "", {})
            out.append(f"<tr><td>{which}</td><td>{run['id']}</td><td>{_e(run['started'])}</td><td>{_e(_labels(run))}"
                       f"</td><td><pre>{_e(_repro(run, sides))}</pre></td></tr>")
        out.append("</table>")
    out.append("<h2>Runs</h2><table><tr><th>#</th><th>started</th><th>median ms</th><th>labels</th><th>run directory</th>"
               "<th>repro</th></tr>")
    for i, (res, run) in enumerate(zip(s["results"], s["runs"]), 1):
        sides = sides_by_campaign.get(run.get("campaign_uid") or "", {})
        out.append(f"<tr><td class=num>{i}</td><td>{_e(run['started'])}</td><td class=num>{res['median_ms']:.6g}</td>"
                   f"<td>{_e(_labels(run))}</td><td><code>{_e(run['path'])}</code></td>"
                   f"<td><pre>{_e(_repro(run, sides))}</pre></td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out)


def index_page(found: dict, pages: dict) -> str:
    series = found["series"]
    dtypes = sorted({s["results"][-1]["dtype"] for s in series})
    out = [_head("zlf history"), "<h1>zlf history</h1>",
           f"<p>{len(series)} series; changes found by PELT and confirmed by Welch's t-test. "
           f"Showing <span id=shown>{len(series)}</span>.</p>",
           "<div class=filters><label>op <input id=f-op type=search placeholder='e.g. matmul'></label>"
           "<label>dtype <select id=f-dtype><option value=''>all</option>"
           + "".join(f"<option>{_e(d)}</option>" for d in dtypes) + "</select></label>"
           "<label>label <input id=f-label type=search placeholder='e.g. compiler=abc'></label></div>"]

    def attrs(s):
        labels = " ".join(sorted({_labels(r) for r in s["runs"]}))
        return (f"data-op='{_e(s['results'][-1]['op'])}' data-dtype='{_e(s['results'][-1]['dtype'])}' "
                f"data-labels='{_e(labels)}'")
    latest = sorted(((c, s) for s in series for c in s["changes"]), key=lambda cs: cs[0]["after"]["started"],
                    reverse=True)
    out.append("<h2>Latest changes</h2>")
    if latest:
        out.append("<table id=changes><tr><th>point</th><th>change</th><th>interval</th><th>first run after</th>"
                   "<th>labels that changed</th></tr>")
        for c, s in latest:
            ch = c["change"]
            cls = "slower" if ch.ratio > 1 else "faster"
            out.append(f"<tr {attrs(s)}><td><a href='{_e(pages[id(s)])}'>{_e(s['point'])}</a></td>"
                       f"<td class='num {cls}'>{_e(_fmt_pct(ch.pct))}</td>"
                       f"<td class=num>{_e(_fmt_pct((ch.lo - 1) * 100))} .. {_e(_fmt_pct((ch.hi - 1) * 100))}</td>"
                       f"<td>{_e(c['after']['started'])}</td><td>"
                       + _e(", ".join(f"{k}: {a} → {b}" for k, (a, b) in c["labels"].items())) + "</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class=empty>No confirmed change.</p>")
    out.append("<h2>Points with missing data</h2>")
    if found["missing"]:
        out.append("<table id=missing><tr><th>point</th><th>last ok</th><th>now</th><th>runs since</th></tr>")
        for m in found["missing"]:
            out.append(f"<tr data-op='{_e(m['point'].split('/')[0])}' data-dtype='{_e(m['point'].split('/')[-1])}' "
                       f"data-labels=''><td>{_e(m['point'])}</td><td>{_e(m['last_ok']['started'])}</td>"
                       f"<td>{_e(m['now'])}</td><td class=num>{m['runs_since']}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class=empty>Every point still reports.</p>")
    out.append("<h2>All series</h2><table id=series><tr><th>point</th><th>environment</th><th>side</th><th>runs</th>"
               "<th>latest ms</th><th>changes</th></tr>")
    for s in series:
        out.append(f"<tr {attrs(s)}><td><a href='{_e(pages[id(s)])}'>{_e(s['point'])}</a></td>"
                   f"<td><code>{_e(s['env_key'])}</code> {_e(s['runs'][-1]['device'])}</td><td>{_e(s['side'])}</td>"
                   f"<td class=num>{len(s['results'])}</td><td class=num>{s['results'][-1]['median_ms']:.6g}</td>"
                   f"<td class=num>{len(s['changes'])}</td></tr>")
    out.append(f"</table><script>{FILTER_JS}</script></body></html>")
    return "\n".join(out)


def _ours(out: Path) -> set:
    """The names zlf history html wrote into ``out`` last time (its mark lists them), or None when
    ``out`` is not such a site (no mark, or a mark that is a link or no regular file)."""
    mark = out / MARK
    try:
        st = os.lstat(mark)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    lines = mark.read_text(errors="replace").splitlines()
    return {ln for ln in lines[1:] if ln and "/" not in ln} | {MARK}


def write(out: Path, found: dict, campaigns: list) -> Path:
    """Write the site to ``out`` (new, empty, or a site zlf wrote, holding nothing else) and return it."""
    if out.is_symlink():
        raise UsageError(f"{out}: is a link; name the folder itself")
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"{out}: not a folder")
        present = {p.name for p in out.iterdir()}
        if present:
            ours = _ours(out)
            if ours is None:
                raise UsageError(f"{out}: a folder that is not empty and was not written by zlf history html; "
                                 "name a new one")
            others = sorted(present - ours)
            if others:  # replacing the folder whole would delete them
                raise UsageError(f"{out}: holds files zlf history html did not write ({', '.join(others[:3])}"
                                 f"{' ...' if len(others) > 3 else ''}); move them out or name a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    sides_by_campaign = {c["uid"]: c["sides"] for c in campaigns}
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        pages = {}
        for s in found["series"]:
            name = page_name(s["point"], s["env_key"], s["side"])
            pages[id(s)] = name
            (tmp / name).write_text(point_page(s, sides_by_campaign), encoding="utf-8")
        (tmp / "index.html").write_text(index_page(found, pages), encoding="utf-8")
        written = sorted(p.name for p in tmp.iterdir())
        (tmp / MARK).write_text("written by zlf history html; its files:\n" + "\n".join(written) + "\n")
        os.chmod(tmp, 0o755)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
