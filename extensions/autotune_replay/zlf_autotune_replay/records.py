"""The autotune record files: one JSON file per kernel under ``<run dir>/autotune_records/``.

A file looks like this (``decisions`` grows as the run goes; the file is rewritten atomically
after every decision, so a crash keeps everything decided before it)::

    {
      "format": "zlf-autotune-record/1",
      "kernel": "zlf.ops.builtin.matmul_kernel",     # module-qualified name of the @jit function
      "source_sha256": "3f0c...",                     # of its source text, never of the Triton build
      "tuner": "triton.runtime.autotuner.Autotuner",
      "key_names": ["M", "N", "K"],
      "config_space": [{"kwargs": {...}, "num_warps": 8, ...}, ...],
      "decisions": [
        {"key": [64, 64, 64, "torch.float32", "torch.float32", "torch.float32"],
         "config": {"kwargs": {"BLOCK_M": 64, ...}, "num_warps": 4, "num_stages": 4,
                    "num_ctas": 1, "maxnreg": null},
         "how": "swept",                              # or "libtuner_cache" (FlagGems' sqlite answered)
         "point": "matmul/64x64x64/float32",          # null: decided before the first point
         "bench_s": 0.21,
         "timings_ms": [{"config": {...}, "p50": 0.8, "p20": 0.7, "p80": 0.9}, ...]}
      ]
    }

Kernel identity is the pair (name, source hash): it survives a compiler change, which is the
whole point (side A and side B are different Triton builds running the same kernel source).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
import textwrap
from pathlib import Path
from typing import Optional

import attrs

from zlf import UsageError, readers
from zlf.rundir import RunDir, write_atomic

FORMAT = "zlf-autotune-record/1"
#: what a replay reads of a record file (zlf.readers checks each file against it before use)
RECORD_SCHEMA = {
    "type": "object",
    "required": ["format", "kernel", "source_sha256", "decisions"],
    "properties": {
        "format": {"const": FORMAT},
        "kernel": {"type": "string", "minLength": 1},
        "source_sha256": {"type": "string"},
        "key_names": {"type": "array", "items": {"type": "string"}},
        "decisions": {"type": "array", "items": {
            "type": "object", "required": ["key", "config"],
            "properties": {"key": {"type": "array"},
                           "config": {"type": "object", "required": ["kwargs"],
                                      "properties": {"kwargs": {"type": "object"},
                                                     "num_warps": {"type": ["integer", "null"], "minimum": 1},
                                                     "num_stages": {"type": ["integer", "null"], "minimum": 0},
                                                     "num_ctas": {"type": ["integer", "null"], "minimum": 1},
                                                     "maxnreg": {"type": ["integer", "null"], "minimum": 1}}},
                           "point": {"type": ["string", "null"]},
                           "how": {"type": "string"}}}},
    },
}
RECORDS_DIR = "autotune_records"
#: the Config fields besides kwargs, in Triton's order; absent ones are skipped on older Tritons.
CONFIG_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


# ----------------------------------------------------------------------------- kernel identity
@attrs.frozen
class KernelIdentity:
    """Who a decision belongs to: module-qualified name and a hash of the kernel's source."""

    name: str
    source_sha256: str

    @classmethod
    def of(cls, tuner) -> "KernelIdentity":
        base = getattr(tuner, "base_fn", None) or tuner.fn
        while not inspect.isfunction(base) and hasattr(base, "fn"):
            base = base.fn
        name = f"{getattr(base, '__module__', '?')}.{getattr(base, '__qualname__', getattr(base, '__name__', '?'))}"
        return cls(name, hashlib.sha256(kernel_source(base).encode()).hexdigest())


def kernel_source(fn) -> str:
    """The kernel's source without decorators, as Triton's JIT reads it (``JITCallable._src``)."""
    try:
        src = textwrap.dedent("".join(inspect.getsourcelines(fn)[0]))
    except (OSError, TypeError):
        return getattr(fn, "src", "") or getattr(fn, "_src", "") or ""
    found = re.search(r"^def\s+\w+\s*\(", src, re.MULTILINE)
    return src[found.start():] if found else src


def file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


# ----------------------------------------------------------------------------- configs and keys
def config_to_json(config) -> dict:
    d = {"kwargs": {k: _plain(v) for k, v in dict(config.kwargs).items()}}
    for field in CONFIG_FIELDS:
        if hasattr(config, field):
            d[field] = getattr(config, field)
    if getattr(config, "ir_override", None):
        d["ir_override"] = config.ir_override
    return d


def config_from_json(d: dict):
    """A ``triton.Config`` from :func:`config_to_json`'s dict; raises ValueError if it is not one."""
    import triton

    if not isinstance(d, dict) or not isinstance(d.get("kwargs"), dict):
        raise ValueError(f"not a config: {d!r}")
    accepted = inspect.signature(triton.Config.__init__).parameters
    extra = {k: v for k, v in d.items() if k != "kwargs" and k in accepted}
    return triton.Config(dict(d["kwargs"]), **extra)


def config_label(d: dict) -> str:
    """``BLOCK_M=64 BLOCK_N=128 w4 s3`` -- short enough for a table cell."""
    kw = " ".join(f"{k}={v}" for k, v in d.get("kwargs", {}).items())
    tail = f"w{d.get('num_warps')} s{d.get('num_stages')}"
    if d.get("num_ctas") not in (None, 1):
        tail += f" c{d['num_ctas']}"
    if d.get("maxnreg") is not None:
        tail += f" r{d['maxnreg']}"
    return f"{kw} {tail}".strip()


def _plain(v):
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


def key_to_json(key) -> list:
    """The tuning key as a JSON list (dtypes and other objects become their ``repr``/str)."""
    return json.loads(json.dumps(list(key), default=str))


def canonical_key(key) -> str:
    """One string per key, equal for a live key and the same key read back from a record."""
    return json.dumps(key_to_json(key))


def timings_to_json(configs_timings) -> list:
    rows = []
    for config, t in (configs_timings or {}).items():
        values = list(t) if isinstance(t, (list, tuple)) else [t]
        row = {"config": config_to_json(config)}
        for name, v in zip(("p50", "p20", "p80"), values):
            v = float(v)
            row[name] = v if math.isfinite(v) else None  # inf = the config failed to compile or run
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- writing
def write_record(path: Path, doc: dict) -> None:
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=False) + "\n")


class RecordWriter:
    """Keeps one document per kernel and rewrites its file after every decision."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(exist_ok=True)
        self._docs: dict = {}  # KernelIdentity -> (path, doc)
        self._stems: dict = {}  # file stem -> KernelIdentity

    def _slot(self, identity: KernelIdentity, tuner) -> tuple:
        if identity not in self._docs:
            stem = file_stem(identity.name)
            if self._stems.get(stem, identity) != identity:  # same name, other source: keep both
                stem = f"{stem}@{identity.source_sha256[:8]}"
            self._stems[stem] = identity
            doc = {
                "format": FORMAT,
                "kernel": identity.name,
                "source_sha256": identity.source_sha256,
                "tuner": f"{type(tuner).__module__}.{type(tuner).__qualname__}",
                "key_names": list(getattr(tuner, "keys", []) or []),
                "config_space": [config_to_json(c) for c in getattr(tuner, "configs", [])],
                "decisions": [],
            }
            self._docs[identity] = (self.dir / f"{stem}.json", doc)
        return self._docs[identity]

    def add(self, identity: KernelIdentity, tuner, decision: dict) -> Path:
        path, doc = self._slot(identity, tuner)
        canon = json.dumps(decision["key"])
        doc["decisions"] = [d for d in doc["decisions"] if json.dumps(d["key"]) != canon] + [decision]
        write_record(path, doc)
        return path

    def summary(self) -> dict:
        return {identity.name: len(doc["decisions"]) for identity, (_, doc) in self._docs.items()}


# ----------------------------------------------------------------------------- reading (replay)
@attrs.frozen
class Lookup:
    """What the record says for one (kernel, key): a config dict, or why there is none."""

    config: Optional[dict] = None
    reason: Optional[str] = None  # missing_kernel | source_changed | missing_key


class ReplaySource:
    """The decisions of a record run, indexed by kernel identity and canonical key."""

    def __init__(self, run_dir: Path, meta: dict, docs: list):
        self.dir = run_dir
        self.meta = meta
        self._by_name: dict = {}
        self.decisions = 0
        for doc in docs:
            table = {json.dumps(d["key"]): d["config"] for d in doc["decisions"]}
            self._by_name.setdefault(doc["kernel"], {})[doc["source_sha256"]] = table
            self.decisions += len(table)

    @property
    def kernels(self) -> int:
        return sum(len(v) for v in self._by_name.values())

    def lookup(self, identity: KernelIdentity, canon_key: str) -> Lookup:
        by_source = self._by_name.get(identity.name)
        if not by_source:
            return Lookup(reason="missing_kernel")
        table = by_source.get(identity.source_sha256)
        if table is None:
            return Lookup(reason="source_changed")
        config = table.get(canon_key)
        return Lookup(config=config) if config is not None else Lookup(reason="missing_key")

    @classmethod
    def open(cls, path, option: str = "--replay-from") -> "ReplaySource":
        """Load a record run, or raise a one-line UsageError (a replay run is refused).

        :param option: how the user named it, ``--replay-from`` or an environment variable.
        """
        sep = " " if option.startswith("-") else "="
        run_dir = Path(path).expanduser()
        if not run_dir.is_dir():
            raise UsageError(f"{option}{sep}{path}: not a directory")
        try:  # bounded regular files of their schema (zlf.readers): one line naming the file if not
            meta = RunDir(run_dir).meta()
        except UsageError as exc:
            raise UsageError(f"{option}{sep}{exc}") from None
        autotune = meta.get("autotune") or {}
        if autotune.get("mode") == "replay":
            origin = autotune.get("source") or "?"
            raise UsageError(
                f"{option}{sep}{path}: that run replayed its autotune configs from {origin}; "
                f"replay from the original record run instead: {option}{sep}{origin}"
            )
        records = run_dir / RECORDS_DIR
        if not records.is_dir():
            raise UsageError(f"{option}{sep}{path}: no {RECORDS_DIR}/ there (record it with: zlf run --ext autotune_replay ...)")
        docs = []
        for f in sorted(records.glob("*.json")):
            try:
                doc = readers.read_json(f, schema=RECORD_SCHEMA, limit=readers.LIMITS["record"],
                                        what=f"{FORMAT} file")
            except UsageError as exc:
                raise UsageError(f"{option}{sep}{exc}") from None
            docs.append(doc)
        return cls(run_dir.resolve(), meta, docs)
