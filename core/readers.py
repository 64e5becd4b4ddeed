"""Reading a file zlf did not just write: bounded, validated, one line when it is bad.

Run directories, campaigns, configuration and shape files travel between machines and people,
so every file zlf reads back is untrusted data. Each reader here:

* opens the path without blocking (``O_NONBLOCK``) and takes only a **regular file**: a FIFO, a
  directory, a socket or a device (``/dev/zero``, a link to ``/dev/urandom``) is refused before
  a byte is read;
* reads at most ``limit`` bytes (:data:`LIMITS`, generous for real data): a larger file, sparse
  or growing, is refused without being read;
* decodes **UTF-8** (a UTF-8 byte-order mark is skipped; UTF-16 and other bytes are refused);
* parses **JSON** strictly: no ``NaN`` / ``Infinity``, every number finite and within
  :data:`MAX_NUMBER`, no key twice in an object, nesting at most :data:`MAX_DEPTH` deep;
  **YAML** with the safe loader only (no ``!!python`` tags), at most :data:`MAX_YAML_VALUES`
  values once every alias and merge key is expanded (counted on the composed nodes, before a
  document is built), no recursive alias, no key twice in a mapping;
* validates the document against its JSON Schema (:mod:`zlf.schemas`) when given one.

What is wrong raises :class:`BadFile`, a :class:`~zlf.errors.UsageError`: the command line
prints one line naming the file (and the line, where there is one), under
:data:`MESSAGE_CHARS` characters, and exits with code 2. A missing file raises
``FileNotFoundError`` as ``open`` does, for callers to whom a missing file means something::

    from zlf import readers
    meta = readers.read_json(path, schema="meta", what="meta.json")
    docs, skipped = readers.read_jsonl(path, schema="result", limit=readers.LIMITS["result"])
    doc = readers.read_yaml(path, what="shape file")

An extension reads its own files the same way (``schema`` may be a schema dict of its own).
"""
from __future__ import annotations

import functools
import json
import math
import os
import stat
from typing import Optional

from .errors import UsageError

KiB = 1024
MiB = 1024 * KiB

#: the most bytes read from each kind of file (docs/formats.md, "Limits"); a larger one is refused.
LIMITS = {
    "result": 256 * MiB,     # results.jsonl of a run (every point's record, samples included)
    "meta": 16 * MiB,        # meta.json
    "campaign": 64 * MiB,    # campaign.json
    "summary": 64 * MiB,     # summary.json (--noise-from, zlf triage)
    "config": 16 * MiB,      # --config FILE, the configuration a child is given
    "ceilings": 1 * MiB,     # the device ceilings cache
    "record": 64 * MiB,      # an extension's record files (one JSON document each)
    "ir_index": 64 * MiB,    # ir/index.tsv
    "yaml": 4 * MiB,         # shape files, shapes.yaml, any YAML
    "json": 16 * MiB,        # any other JSON file
    "text": 16 * MiB,        # any other text file
}
#: the deepest nesting of lists and objects a JSON document may have.
MAX_DEPTH = 64
#: the largest magnitude of a number in a JSON document (2**63: an int64; floats too).
MAX_NUMBER = float(2 ** 63)
#: the most values (scalars, lists, mappings) a YAML document may expand to, aliases included.
MAX_YAML_VALUES = 250_000
#: a message longer than this is cut (a file's line can be megabytes).
MESSAGE_CHARS = 200
#: what a message keeps of the problem before it shortens the path (from its start: the file's
#: name stays).
PROBLEM_CHARS = 100

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class BadFile(UsageError):
    """A file that is not what zlf reads (one line naming it, exit code 2)."""

    def __init__(self, path, problem: str, line: Optional[int] = None):
        self.path, self.problem, self.line = os.fspath(path), problem, line
        super().__init__(_message(self.path, problem, line))


def _message(path: str, problem: str, line: Optional[int]) -> str:
    from .console import clean

    text = clean(" ".join(str(problem).split()))
    at = f":{line}" if line else ""
    budget = MESSAGE_CHARS - len("zlf: error: ") - 20  # 20: a caller's prefix (--option)
    # the problem keeps up to PROBLEM_CHARS: a long folder (a deep TMPDIR, a cluster's scratch
    # space) shortens the path from its start, never the reason it is refused
    keep = max(40, budget - min(len(text), PROBLEM_CHARS) - len(at) - 2)
    where = clean(path if len(path) <= keep else "..." + path[-(keep - 3):])
    head = f"{where}{at}: "
    room = max(40, budget - len(head))
    return head + (text if len(text) <= room else text[:room - 3] + "...")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n // KiB} KiB" if n >= KiB else f"{n} bytes"


# ----------------------------------------------------------------------------- bytes and text
def read_bytes(path, limit: Optional[int] = None, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` (default ``LIMITS['text']``)."""
    limit = LIMITS["text"] if limit is None else limit
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:  # a socket (ENXIO), no permission, a loop of links
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                raise BadFile(path, f"a socket, not a {what} (zlf reads regular files only)") from None
        except OSError:
            pass
        raise BadFile(path, f"cannot read this {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise BadFile(path, f"{kind}, not a {what} (zlf reads regular files only)")
        if st.st_size > limit:
            raise BadFile(path, f"{st.st_size} bytes, more than the {_size(limit)} zlf reads from a {what}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise BadFile(path, f"cannot read this {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # it grew, or says it is smaller than it is (/proc)
        raise BadFile(path, f"more than the {_size(limit)} zlf reads from a {what}")
    return data


def _decode(data: bytes, path, what: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise BadFile(path, f"UTF-16 text; zlf reads a {what} as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BadFile(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x}); zlf reads a {what} as UTF-8", line) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path, limit: Optional[int] = None, what: str = "file") -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``limit`` bytes)."""
    return _decode(read_bytes(path, limit, what), path, what)


# ----------------------------------------------------------------------------- JSON
class _Refused(ValueError):
    pass


def _refuse_constant(token: str):
    raise _Refused(f"{token} is not a JSON number")


def _out_of_range(text: str) -> str:
    shown = text if len(text) <= 12 else text[:9] + "..."
    return f"{shown} is out of range (beyond 2**63)"


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_NUMBER:
        raise _Refused(_out_of_range(text))
    return value


def _int(text: str) -> int:
    if len(text) > 20 or abs(int(text)) > MAX_NUMBER:
        raise _Refused(_out_of_range(text))
    return int(text)


def _lenient_float(text: str) -> float:  # a record's number out of range reads as "no number"
    value = float(text)
    return value if math.isfinite(value) and abs(value) <= MAX_NUMBER else math.nan


def _lenient_int(text: str):
    return int(text) if len(text) <= 20 and abs(int(text)) <= MAX_NUMBER else math.nan


def _pairs(pairs):
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _Refused(f"the key {key[:40]!r} is given twice in one object")
    return doc


def _depth_ok(doc, limit: int) -> bool:
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return True


def parse_json(text: str, path, what: str = "JSON file", line: Optional[int] = None, lenient: bool = False):
    """``text`` as JSON under the rules above, or :class:`BadFile` naming ``path`` (and ``line``).
    ``lenient``: a non-finite or out-of-range number reads as NaN instead (a record's median
    that is no time) rather than refusing the document."""
    try:
        doc = json.loads(text, object_pairs_hook=_pairs,
                         parse_constant=(lambda t: math.nan) if lenient else _refuse_constant,
                         parse_float=_lenient_float if lenient else _float, parse_int=_lenient_int if lenient else _int)
    except _Refused as exc:
        raise BadFile(path, f"{_not_a(what)}: {exc}", line) from None
    except RecursionError:
        raise BadFile(path, f"{_not_a(what)}: nested more than {MAX_DEPTH} deep", line) from None
    except ValueError as exc:  # json.JSONDecodeError, or an int of more digits than Python converts
        where = line if line else getattr(exc, "lineno", None)
        raise BadFile(path, f"not valid JSON ({getattr(exc, 'msg', exc)})", where) from None
    if isinstance(doc, (dict, list)) and not _depth_ok(doc, MAX_DEPTH):
        raise BadFile(path, f"{_not_a(what)}: nested more than {MAX_DEPTH} deep", line)
    return doc


@functools.lru_cache(maxsize=None)
def _compiled(name: str, partial: bool = False):
    from . import schemas

    schema = schemas.load(name)
    if partial:  # every field present is checked; a field may be missing (older zlf, zlf ir's meta.json)
        schema.pop("required", None)
        schema.pop("allOf", None)  # and the rules between fields (an "ok" record without its timer)
    return _compile(schema)


def _compile(schema: dict):
    import fastjsonschema

    # a time written by another tool need not be RFC 3339 to the letter: the types and ranges are what readers rely on
    return fastjsonschema.compile(schema, formats={"date-time": lambda value: True})


@functools.lru_cache(maxsize=64)
def _compiled_text(text: str):
    return _compile(json.loads(text))


def _validator(schema, partial: bool = False):
    if schema is None:
        return None
    if isinstance(schema, str):
        return _compiled(schema, partial)
    return _compiled_text(json.dumps(schema, sort_keys=True))


def _not_a(what: str) -> str:
    return f"not a {what}" if what.startswith("zlf") else f"not a zlf {what}"


def _where_in_doc(message: str) -> str:
    """fastjsonschema's ``data.runs[0].round must be integer`` as ``runs[0].round must be integer``."""
    if message.startswith("data."):
        return message[5:]
    if message.startswith("data["):
        return message[4:]
    return "the document" + message[4:] if message.startswith("data ") else message


def check(doc, schema, path, what: str, line: Optional[int] = None, partial: bool = False):
    """``doc`` when it matches ``schema`` (a name in :data:`zlf.schemas.NAMES` or a schema
    dict), else :class:`BadFile` saying where it does not. ``partial``: the top-level fields the
    schema requires may be missing and its rules between fields are not applied (each field
    present is still checked)."""
    import fastjsonschema

    validate = _validator(schema, partial)
    if validate is None:
        return doc
    try:
        validate(doc)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise BadFile(path, f"{_not_a(what)}: {_where_in_doc(exc.message)}", line) from None
    return doc


def valid(doc, schema, partial: bool = False) -> bool:
    """Whether ``doc`` matches ``schema`` (as :func:`check`, without raising)."""
    import fastjsonschema

    try:
        _validator(schema, partial)(doc)
    except fastjsonschema.JsonSchemaValueException:
        return False
    return True


def read_json(path, schema=None, limit: Optional[int] = None, what: Optional[str] = None, partial: bool = False):
    """The JSON document in the regular file ``path``, parsed and (with ``schema``) validated
    (``partial`` as :func:`check` says). ``limit`` defaults to ``LIMITS[schema]`` for a schema
    name, else ``LIMITS['json']``."""
    what = what or (f"{schema}.json" if isinstance(schema, str) else os.path.basename(os.fspath(path)) or "JSON file")
    if limit is None:
        limit = LIMITS.get(schema, LIMITS["json"]) if isinstance(schema, str) else LIMITS["json"]
    doc = parse_json(read_text(path, limit, what), path, what)
    return check(doc, schema, path, what, partial=partial)


def read_jsonl(path, schema=None, limit: Optional[int] = None, what: Optional[str] = None,
               skip_bad: bool = True, lenient: bool = False, partial: bool = False) -> tuple:
    """``(documents, skipped)`` of a JSON-lines file: one document per non-blank line. A line
    that is not UTF-8 JSON of ``schema`` is skipped and counted (``skip_bad``; a crash can cut
    the last line), or raises :class:`BadFile` naming its line. The whole file is bounded as
    :func:`read_json`'s is; ``lenient`` numbers as :func:`parse_json` says, ``partial`` as
    :func:`check`."""
    what = what or os.path.basename(os.fspath(path)) or "JSON-lines file"
    if limit is None:
        limit = LIMITS.get(schema, LIMITS["json"]) if isinstance(schema, str) else LIMITS["json"]
    data = read_bytes(path, limit, what)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    docs, skipped = [], 0
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = _decode(raw, path, what)
            docs.append(check(parse_json(text, path, what, line=n, lenient=lenient), schema, path, what, line=n,
                              partial=partial))
        except BadFile as exc:
            if not skip_bad:
                raise BadFile(path, exc.problem, n) from None
            skipped += 1
    return docs, skipped


# ----------------------------------------------------------------------------- YAML
def _yaml_loader():
    import yaml

    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


def _yaml_checked(text: str, path, what: str, limit: int) -> None:
    """Walk the parser's events of ``text`` (no document is built) and refuse, naming the line:
    nesting deeper than :data:`MAX_DEPTH` (the C composer would overflow the stack); more than
    ``limit`` values once each alias is counted as often as it is used (merge keys included); an
    alias to a value that holds it; a key given twice in one mapping."""
    import yaml
    from yaml.events import (AliasEvent, CollectionStartEvent, MappingEndEvent, MappingStartEvent,
                             ScalarEvent, SequenceEndEvent)

    anchors: dict = {}   # anchor -> values its node expands to
    open_: set = set()   # anchors of the collections being read
    frames: list = []    # per open collection: [values, anchor, is a mapping, items seen, {key: line}]
    values = 0           # values so far, aliases expanded

    def item(count: int, event) -> None:
        nonlocal values
        values += count
        if values > limit:
            raise BadFile(path, f"expands to more than {limit} values (each alias counted as often as it is used)",
                          event.start_mark.line + 1)
        if not frames:
            return
        frame = frames[-1]
        frame[0] += count
        if frame[2]:
            if frame[3] % 2 == 0 and isinstance(event, ScalarEvent) and event.value != "<<":
                line = event.start_mark.line + 1
                if event.value in frame[4]:
                    raise BadFile(path, f"not a {what}: the key {event.value[:40]!r} is given twice "
                                        f"(lines {frame[4][event.value]} and {line})", line)
                frame[4][event.value] = line
            frame[3] += 1

    for event in yaml.parse(text, Loader=_yaml_loader()):
        if isinstance(event, AliasEvent):
            if event.anchor in open_:
                raise BadFile(path, f"not a {what}: the alias *{event.anchor} is inside the value it names",
                              event.start_mark.line + 1)
            item(anchors.get(event.anchor, 1), event)
        elif isinstance(event, ScalarEvent):
            if event.anchor:
                anchors[event.anchor] = 1
            item(1, event)
        elif isinstance(event, CollectionStartEvent):
            if len(frames) >= MAX_DEPTH:
                raise BadFile(path, f"not a {what}: nested more than {MAX_DEPTH} deep", event.start_mark.line + 1)
            item(1, event)  # counts itself in its parent (a key, when in a mapping)
            if event.anchor:
                open_.add(event.anchor)
            frames.append([1, event.anchor, isinstance(event, MappingStartEvent), 0, {}])
        elif isinstance(event, (MappingEndEvent, SequenceEndEvent)):
            count, anchor = frames.pop()[:2]
            if anchor:
                open_.discard(anchor)
                anchors[anchor] = count
            if frames:
                frames[-1][0] += count - 1  # its start counted 1 already


def parse_yaml(text: str, path, what: str = "YAML file", max_values: int = MAX_YAML_VALUES):
    """``text`` as one YAML document (safe tags only), bounded as the module says."""
    import yaml

    loader = _yaml_loader()(text)
    try:
        _yaml_checked(text, path, what, max_values)
        node = loader.get_single_node()
        return None if node is None else loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = " ".join(p for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
        problem = problem or (str(exc).splitlines() or ["?"])[0]
        raise BadFile(path, f"not valid YAML: {problem}", mark.line + 1 if mark else None) from None
    except RecursionError:
        raise BadFile(path, "not valid YAML: nested too deep") from None
    finally:
        loader.dispose()


def read_yaml(path, limit: Optional[int] = None, what: str = "YAML file", max_values: int = MAX_YAML_VALUES):
    """The YAML document in the regular file ``path`` (at most ``limit`` bytes, default
    ``LIMITS['yaml']``; at most ``max_values`` values once aliases are expanded)."""
    return parse_yaml(read_text(path, LIMITS["yaml"] if limit is None else limit, what), path, what, max_values)


def read_tsv(path, limit: Optional[int] = None, what: str = "TSV file", schema=None) -> list:
    """Rows of a tab-separated file with a header line, as ``{column: text}`` (each row
    validated against ``schema`` when given)."""
    lines = read_text(path, LIMITS["ir_index"] if limit is None else limit, what).splitlines()
    if not lines:
        return []
    header = lines[0].split("\t")
    rows = []
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise BadFile(path, f"{len(cells)} cells under a header of {len(header)}", n)
        rows.append(check(dict(zip(header, cells)), schema, path, what, line=n))
    return rows
