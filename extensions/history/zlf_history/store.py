"""The history store: every recorded run's points, with what identifies them, in one database.

SQLite by default (a file, no server); PostgreSQL when a team shares one (``--db
postgresql://…``). One SQLAlchemy Core schema serves both, so every query below runs unchanged on
either. The schema carries a version; :data:`MIGRATIONS` brings an older database up to date in one
transaction, and a database written by a newer zlf is refused rather than misread.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Optional

import sqlalchemy as sa
from sqlalchemy.exc import DatabaseError, OperationalError

from zlf.errors import UsageError

#: the schema this code writes; a database at a higher version was written by a newer zlf
SCHEMA_VERSION = 1
ENV_DB = "ZLF_HISTORY_DB"

metadata = sa.MetaData()

info = sa.Table(
    "zlf_history_info", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # sha256 of what makes a run itself (meta.json's start, command and folder, the results'
    # bytes): the same run added twice, from any path, is recorded once
    sa.Column("uid", sa.String(64), nullable=False, unique=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("started", sa.String(40), nullable=False),
    sa.Column("added", sa.String(40), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("command", sa.Text, nullable=False),  # JSON list, redacted
    sa.Column("env_key", sa.String(16), nullable=False),
    sa.Column("backend", sa.String(64), nullable=False),
    sa.Column("device", sa.Text, nullable=False),
    sa.Column("driver", sa.String(64), nullable=False),
    sa.Column("torch", sa.String(64), nullable=False),
    sa.Column("triton", sa.String(64), nullable=False),
    sa.Column("zlf_version", sa.String(32), nullable=False),
    sa.Column("campaign_uid", sa.String(64), nullable=True),
    sa.Column("side", sa.String(8), nullable=True),
    sa.Column("round", sa.Integer, nullable=True),
)

labels = sa.Table(
    "labels", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

results = sa.Table(
    "results", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("point", sa.Text, primary_key=True),
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("dtype", sa.String(64), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("timer", sa.String(64), nullable=True),
    sa.Column("median_ms", sa.Float, nullable=True),
    sa.Column("samples", sa.Integer, nullable=False),
)
sa.Index("results_by_point", results.c.point)

campaigns = sa.Table(
    "campaigns", metadata,
    sa.Column("uid", sa.String(64), primary_key=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("started", sa.String(40), nullable=False),
    sa.Column("added", sa.String(40), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("aa", sa.Boolean, nullable=False),
    sa.Column("sides", sa.Text, nullable=False),  # JSON: each side's redacted environment and interpreter
)

verdicts = sa.Table(
    "verdicts", metadata,
    sa.Column("campaign_uid", sa.String(64), sa.ForeignKey("campaigns.uid", ondelete="CASCADE"), primary_key=True),
    sa.Column("point", sa.Text, primary_key=True),
    sa.Column("verdict", sa.String(16), nullable=False),
    sa.Column("delta_pct", sa.Float, nullable=True),
    sa.Column("delta_lo_pct", sa.Float, nullable=True),
    sa.Column("delta_hi_pct", sa.Float, nullable=True),
    sa.Column("rounds", sa.Integer, nullable=False),
)


def _create_v1(conn) -> None:
    metadata.create_all(conn)


#: ``MIGRATIONS[k]`` takes a database from version k to k + 1 (version 0: empty)
MIGRATIONS = [_create_v1]


def default_db() -> str:
    """``$ZLF_HISTORY_DB``, else the user's data folder (``$XDG_DATA_HOME/zlf/history.sqlite``)."""
    if os.environ.get(ENV_DB):
        return os.environ[ENV_DB]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "zlf", "history.sqlite")


_URL = re.compile(r"^[a-z][a-z0-9+]*://", re.I)


def shown(db: str) -> str:
    """``db`` (or a message holding it) as it may be printed: a URL's password never is, whether
    it stands before the host (up to the last ``@``, ``/`` in it or not) or in the query
    (``?password=``)."""
    def user_info(m):
        info = m.group(2)
        user, sep, _ = info.partition(":")
        return f"{m.group(1)}{user}{':***' if sep else ''}@"
    text = re.sub(r"([a-z][a-z0-9+.-]*://)([^\s@]*)@", user_info, db, flags=re.I)
    return re.sub(r"(?i)([?&;](?:password|passwd|pass|pwd|sslpassword|secret|token)=)[^&;\s]*", r"\1***", text)


def engine_url(db: str) -> str:
    """An SQLAlchemy URL for ``db``: a URL as given (``postgresql://`` through psycopg 3), else a
    path of an SQLite file."""
    if _URL.match(db):
        scheme, rest = db.split("://", 1)
        if scheme in ("postgresql", "postgres"):
            return f"postgresql+psycopg://{rest}"
        if scheme.startswith(("sqlite", "postgresql+")):
            return db
        raise UsageError(f"--db {shown(db)}: only SQLite files and postgresql:// URLs are supported")
    path = Path(db).expanduser()
    if path.exists() and not path.is_file():
        raise UsageError(f"--db {db}: not a regular file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--db {db}: cannot make its folder {path.parent} ({exc.strerror or exc})") from None
    return f"sqlite:///{path}"


def _one_line(db: str, exc: Exception) -> UsageError:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    text = text[0] if text else type(exc).__name__
    if "locked" in text:
        return UsageError(f"history database {shown(db)} is locked by another process; try again when it is done")
    if "not a database" in text or "malformed" in text:
        return UsageError(f"history database {shown(db)} is not a database zlf can read ({text}): "
                          "move it aside or name another with --db")
    return UsageError(f"history database {shown(db)}: {shown(text)}")


class Store:
    """An open history database. Use as a context manager; every method is one transaction."""

    def __init__(self, db: Optional[str] = None, migrations=None):
        self.db = db or default_db()
        self._migrations = MIGRATIONS if migrations is None else migrations
        url = engine_url(self.db)
        kwargs = {}
        if url.startswith("sqlite"):
            # a second writer waits this long for the first, then gets one line, not a hang
            kwargs["connect_args"] = {"timeout": float(os.environ.get("ZLF_HISTORY_LOCK_TIMEOUT", "10"))}
        try:
            self.engine = sa.create_engine(url, **kwargs)
        except ImportError as exc:  # the driver of a postgresql:// URL is an optional dependency
            raise UsageError(f"--db {shown(self.db)}: its database driver is not installed ({exc.name or exc}): "
                             "pip install 'zlf-history[postgres]'") from None
        if url.startswith("sqlite"):
            @sa.event.listens_for(self.engine, "connect")
            def _foreign_keys(dbapi_conn, _record):
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()
        try:
            self.version = self._migrate()
        except (OperationalError, DatabaseError) as exc:
            self.engine.dispose()
            raise _one_line(self.db, exc) from exc

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def _migrate(self) -> int:
        target = len(self._migrations)
        with self.engine.begin() as conn:
            if not sa.inspect(conn).has_table("zlf_history_info"):
                if sa.inspect(conn).get_table_names():
                    raise UsageError(f"history database {shown(self.db)} holds tables that are not zlf's history")
                version = 0
            else:
                row = conn.execute(sa.select(info.c.value).where(info.c.key == "schema_version")).first()
                try:
                    version = int(row[0]) if row else 0
                except (TypeError, ValueError):
                    raise UsageError(f"history database {shown(self.db)} has a schema version zlf cannot read "
                                     f"({str(row[0])[:40]!r}): not a database zlf wrote") from None
            if version > target:
                raise UsageError(f"history database {shown(self.db)} has schema version {version}, written by a "
                                 f"newer zlf (this one reads up to {target}): upgrade zlf-history")
            if version == target:
                return version
            for step in self._migrations[version:]:
                step(conn)
            info.create(conn, checkfirst=True)
            conn.execute(info.delete().where(info.c.key == "schema_version"))
            conn.execute(info.insert().values(key="schema_version", value=str(target)))
        return target

    def run(self, fn, *args, **kwargs):
        """``fn(conn, *args, **kwargs)`` in one transaction; a locked or broken database is one line."""
        try:
            with self.engine.begin() as conn:
                return fn(conn, *args, **kwargs)
        except (OperationalError, DatabaseError) as exc:
            raise _one_line(self.db, exc) from exc

    # ------------------------------------------------------------------ writing
    def add_run(self, row: dict, run_labels: dict, rows: Iterable[dict]) -> Optional[int]:
        """Record one run; None when a run with its uid is recorded already."""
        def add(conn):
            if conn.execute(sa.select(runs.c.id).where(runs.c.uid == row["uid"])).first():
                return None
            run_id = conn.execute(runs.insert().values(**row)).inserted_primary_key[0]
            if run_labels:
                conn.execute(labels.insert(), [{"run_id": run_id, "key": k, "value": v} for k, v in run_labels.items()])
            batch = [dict(r, run_id=run_id) for r in rows]
            if batch:
                conn.execute(results.insert(), batch)
            return run_id
        return self.run(add)

    def add_campaign(self, row: dict, rows: Iterable[dict]) -> bool:
        def add(conn):
            if conn.execute(sa.select(campaigns.c.uid).where(campaigns.c.uid == row["uid"])).first():
                return False
            conn.execute(campaigns.insert().values(**row))
            batch = [dict(r, campaign_uid=row["uid"]) for r in rows]
            if batch:
                conn.execute(verdicts.insert(), batch)
            return True
        return self.run(add)

    # ------------------------------------------------------------------ reading
    def runs(self, where_labels: Optional[dict] = None, op: Optional[str] = None, limit: Optional[int] = None) -> list:
        """Recorded runs, oldest first, each with its labels and point count."""
        def read(conn):
            q = sa.select(runs).order_by(runs.c.started, runs.c.id)
            for k, v in (where_labels or {}).items():
                q = q.where(runs.c.id.in_(sa.select(labels.c.run_id).where(labels.c.key == k, labels.c.value == v)))
            if op:
                q = q.where(runs.c.id.in_(sa.select(results.c.run_id).where(results.c.op == op)))
            found = [dict(r._mapping) for r in conn.execute(q)]
            if limit:
                found = found[-limit:]
            ids = [r["id"] for r in found]
            by_run: dict = {i: {} for i in ids}
            counts: dict = {}
            if ids:
                for r in conn.execute(sa.select(labels).where(labels.c.run_id.in_(ids))):
                    by_run[r.run_id][r.key] = r.value
                for r in conn.execute(sa.select(results.c.run_id, sa.func.count()).where(results.c.run_id.in_(ids))
                                      .group_by(results.c.run_id)):
                    counts[r[0]] = r[1]
            for r in found:
                r["labels"] = by_run[r["id"]]
                r["points"] = counts.get(r["id"], 0)
                r["command"] = json.loads(r["command"])
            return found
        return self.run(read)

    def run_by_id(self, run_id: int) -> Optional[dict]:
        for r in self.runs():
            if r["id"] == run_id:
                return r
        return None

    def results(self, point: Optional[str] = None, op: Optional[str] = None) -> list:
        """Every result with its run's identity, oldest run first."""
        def read(conn):
            q = (sa.select(results, runs.c.started, runs.c.env_key, runs.c.side, runs.c.path, runs.c.uid)
                 .join(runs, runs.c.id == results.c.run_id).order_by(runs.c.started, runs.c.id))
            if point:
                q = q.where(results.c.point == point)
            if op:
                q = q.where(results.c.op == op)
            return [dict(r._mapping) for r in conn.execute(q)]
        return self.run(read)

    def campaigns(self) -> list:
        def read(conn):
            found = [dict(r._mapping) for r in conn.execute(sa.select(campaigns).order_by(campaigns.c.started))]
            for c in found:
                c["sides"] = json.loads(c["sides"])
                c["verdicts"] = [dict(v._mapping) for v in conn.execute(
                    sa.select(verdicts).where(verdicts.c.campaign_uid == c["uid"]).order_by(verdicts.c.point))]
            return found
        return self.run(read)
