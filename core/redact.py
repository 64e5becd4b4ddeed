"""What records (meta.json, campaign.json, results.jsonl, report.md, logs, triage bundles, task
records) may keep: they are meant to be shared, so never a credential, by name or by value.

One function, :func:`redact`, is what every writer applies to what it writes (a JSON document or
a line of text); :func:`safe_environment` is its form for an environment, which leaves a
credential-looking *name* out altogether.

What it covers (docs/hostile.md says the same):

- names: a mapping key or an ``--option`` / ``K=V`` / ``K: V`` name that holds ``KEY``, ``TOKEN``,
  ``SECRET``, ``PASSWORD``, ``PASSWD``, ``PASSPHRASE``, ``CREDENTIAL``, ``AUTH``, ``COOKIE``,
  ``PRIVATE``, ``SIGNATURE``, or the word ``PWD`` / ``PAT`` / ``SESSION`` / ``CRED(S)``, or ends
  in ``PASS`` / ``PWD`` / ``PW`` (``DB_PASS``, ``MYSQL_PWD``): the value is masked (a number only
  under ``PASSWORD``, ``SECRET``, ``*PASS``, ``*PWD`` ...: ``num_tokens=128`` is a count);
- values, anywhere in a text: the token formats of the detect-secrets library's regex detectors
  (AWS access keys, GitHub / GitLab / Slack / Stripe / OpenAI / npm / PyPI / SendGrid / Twilio /
  Telegram / Discord tokens, JWTs, private-key blocks, Azure, IBM, Cloudant, SoftLayer keys ...),
  well-known prefixes (``nvapi-``, ``hf_``, ``sk-``, ``AKIA`` ...), the password of
  ``scheme://user:password@host`` (up to the last ``@``: a password may hold one), a user-only
  ``scheme://TOKEN@host``, ``Bearer`` / ``Basic`` / ``Token`` credentials, and one long
  random-looking word (mixed case and digits, high entropy; a hex hash, a device id or a path is
  not one).
"""
from __future__ import annotations

import functools
import math
import re
from collections import Counter

REDACTED = "<redacted>"

#: parts of a variable name that mark a credential (``NVIDIA_API_KEY``, ``HF_TOKEN``,
#: ``DB_PASSWORD``, ``TORCH_HUB_AUTH``, ``SESSION_COOKIE``, ``GOOGLE_APPLICATION_CREDENTIALS``).
_SECRET_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH",
                 "COOKIE", "PRIVATE", "SIGNATURE")
#: whole words of a name that do (``DB_PWD``, ``GITLAB_PAT``); as parts they would hit other
#: names. ``PASS`` is such a word only at the end (``DB_PASS``): ``LLVM_PASS_PLUGIN_PATH``
#: changes what is compiled.
_SECRET_WORDS = {"PWD", "PAT", "SESSION", "CRED", "CREDS"}
#: endings of a name that do (``DBPASS``, ``MYSQL_PWD``, ``REDIS_PW``).
_SECRET_ENDINGS = ("PASS", "PWD", "_PW")
#: names whose value is a credential even when it is a number (a PIN, a numeric password);
#: under any other credential-looking name a number is a count (``num_tokens=128``, ``key=3``).
_STRONG_PARTS = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "CREDENTIAL", "COOKIE", "PIN")
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")
#: the shell's own names, not credentials.
_NOT_SECRET_NAMES = {"PWD", "OLDPWD"}
#: keys of zlf's own formats that a name rule would hit (an autotune key, a campaign's signature).
_FORMAT_KEYS = {"key", "keys", "key_names", "missing_key", "signature", "sort_keys"}

#: prefixes of well-known token formats (NVIDIA, Hugging Face, GitHub, OpenAI-style, Slack,
#: GitLab, AWS, Google).
_TOKEN_PREFIX = re.compile(r"^(nvapi-|hf_|gh[pousr]_|github_pat_|sk-|xox[abprs]-|glpat-|AKIA|ASIA|AIza)", re.I)
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_+=.~/-]{24,}$")
#: device ids look random too: ``GPU-5f7b2d1e-…`` (CUDA_VISIBLE_DEVICES), hex hashes.
_DEVICE_ID = re.compile(r"^((GPU|MIG)-)*[0-9a-f-]+(/\d+)*$", re.I)
#: ``scheme://user:password@host``: the password runs to the last ``@`` of the authority.
_URL_USERINFO = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://)(?P<user>[^\s/?#@:]*)(?::(?P<password>[^\s/?#]*))?@"
                           r"(?=[^\s/?#@]*(?:[/?#\s'\"]|$))", re.I)
#: ``name=value``, ``name: value``, ``--name value``, ``--name=value`` (the name decides).
_ASSIGNMENT = re.compile(r"(?=(?P<name>(?<![\w-])[A-Za-z_][\w.-]*|(?<![\w-])--?[A-Za-z][\w-]*)"
                         r"(?P<sep>\s*[=:]\s*|(?<=\w)\s+(?=[^\s-]))"
                         r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s&;,\"']+))")  # a lookahead: matches may overlap
#: a name in text is one word of one case (``api_key``, ``AWS_SECRET_ACCESS_KEY``, ``--token``) or an
#: HTTP header (``X-Api-Key``):
#: ``KeyError: 'x'`` or ``KeyboardInterrupt`` name no credential.
_PLAIN_NAME = re.compile(r"^-{0,2}([A-Z0-9_.-]+|[a-z0-9_.-]+|[A-Z][a-z0-9]*(-[A-Z][a-z0-9]*)+)$")
#: a quoted key and its value, as a dict repr or JSON writes them (``{'password': 'x'}``,
#: ``{"api_key": "x"}``): the quotes make it a key whatever its case (``"apiKey"``).
_QUOTED_KEY = re.compile(r"(?P<q>[\"'])(?P<name>[A-Za-z_][\w.-]*)(?P=q)\s*[:=]\s*"
                         r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[^\s,}\]\)]+)")
#: an HTTP header line (``Cookie: a=1; b=2``, ``Authorization: ...``, ``set-cookie: ...``): a
#: credential-named header's value runs to the end of its line.
_HEADER = re.compile(r"^[ \t]*(?P<name>[A-Z][a-z0-9]*(?:-[A-Z][a-z0-9]*)*|[a-z0-9]+(?:-[a-z0-9]+)*|[A-Z0-9]+(?:-[A-Z0-9]+)*)"
                     r":[ \t]*(?P<value>[^\r\n]*?)[ \t]*$", re.M)
#: a URL's query parameter (``?api_key=...&``).
_QUERY = re.compile(r"[?&;](?P<name>[^=&#\s?;]+)=(?P<value>[^&#\s;'\"]*)")
#: an HTTP authorization scheme and its credential.
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Basic|Token|Digest)(?P<sep>\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.I)
_WORD = re.compile(r"[^\s=,;:'\"()\[\]{}<>|`]+")


def secret_name(name: str) -> bool:
    """A name (a variable, an option, a key) that marks its value as a credential."""
    upper = str(name).upper().lstrip("-").replace("-", "_").replace(".", "_")
    if upper in _NOT_SECRET_NAMES:
        return False
    return (any(p in upper for p in _SECRET_PARTS) or bool(_SECRET_WORDS & set(upper.split("_")))
            or upper.endswith(_SECRET_ENDINGS))


def _masks(name: str, value) -> bool:
    """Whether ``value`` under the credential-looking ``name`` is masked: always, unless it is a
    number and the name is no strong credential name (``num_tokens=128`` is a count)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)) or _NUMBER.match(str(value).strip()):
        upper = str(name).upper()
        return any(p in upper for p in _STRONG_PARTS) or upper.replace("-", "_").endswith(_SECRET_ENDINGS)
    return True


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def secret_value(value: str) -> bool:
    """A value shaped like a credential: a known token prefix, or one long random-looking word
    (mixed case and digits, high entropy; a hex hash or a path is not one)."""
    value = str(value).strip()
    prefix = _TOKEN_PREFIX.match(value)
    if prefix and "/" not in value:
        rest = value[prefix.end():]
        upper, lower = any(c.isupper() for c in rest), any(c.islower() for c in rest)
        digit = any(c.isdigit() for c in rest)
        if len(rest) >= 12 and ((upper and lower) or (digit and (upper or lower) and _entropy(rest) >= 3.5)):
            return True
    if not _TOKEN_CHARS.match(value) or _DEVICE_ID.match(value):
        return False
    if value.count("/") > 1 or value.startswith(("/", "~", ".")):  # a path
        return False
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value) and any(c.isdigit() for c in value)
    return mixed and _entropy(value) >= 4.0


@functools.lru_cache(maxsize=1)
def _library_patterns() -> tuple:
    """The token formats of detect-secrets' regex detectors (its plugins, used as a library);
    not the keyword, entropy or public-IP detectors: zlf's own name and value rules are those."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:  # the formats zlf knows itself still apply
        return ()
    skip = {"IPPublicDetector", "KeywordDetector"}
    patterns = []
    for cls in get_mapping_from_secret_type_to_class().values():
        if issubclass(cls, RegexBasedDetector) and cls.__name__ not in skip:
            patterns.extend(cls().denylist)
    return tuple(patterns)


def _mask_spans(text: str, spans) -> str:
    """``text`` with each union of overlapping ``spans`` replaced by one :data:`REDACTED`."""
    merged = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, last = [], 0
    for start, end in merged:
        out += [text[last:start], REDACTED]
        last = end
    return "".join(out) + text[last:]


@functools.lru_cache(maxsize=1)
def _library_any():
    """All of :func:`_library_patterns` as one expression (each with its own flags): one pass
    over a text that holds none of them, which is nearly every text of a record."""
    import re as _re

    parts = []
    for p in _library_patterns():
        flags = ("i" if p.flags & _re.IGNORECASE else "") + ("x" if p.flags & _re.VERBOSE else "")
        parts.append(f"(?{flags}:{p.pattern})" if flags else f"(?:{p.pattern})")
    return _re.compile("|".join(parts)) if parts else None


def _library_spans(text: str) -> list:
    spans = []
    anything = _library_any()
    if anything is None or len(text) < 11 or not anything.search(text):
        return spans
    for pattern in _library_patterns():
        for m in pattern.finditer(text):
            # a pattern whose group is the secret after a keyword or a user (``://user:(pw)@``)
            # masks that group; one whose group is its own prefix (``(ghp)_...``) the whole match
            g = m.lastindex
            if g and m.start(g) > m.start() and m.end(g) > m.start(g):
                spans.append((m.start(g), m.end(g)))
            elif m.end() > m.start():
                spans.append((m.start(), m.end()))
    return spans


def redact_text(text: str) -> str:
    """``text`` with every credential it holds, by name or by value, replaced by ``<redacted>``."""
    if not isinstance(text, str) or not text:
        return text
    return _redact_text(text)


@functools.lru_cache(maxsize=8192)  # records repeat their strings (kernel names, point ids)
def _redact_text(text: str) -> str:
    spans = _library_spans(text)
    for m in _URL_USERINFO.finditer(text):
        if m.group("password") is not None:
            if m.group("password"):
                spans.append((m.start("password"), m.end("password")))
        elif m.group("user") and (secret_value(m.group("user")) or len(m.group("user")) >= 20):
            spans.append((m.start("user"), m.end("user")))  # https://TOKEN@host
    for m in _AUTH_SCHEME.finditer(text):
        spans.append((m.start("value"), m.end("value")))
    for m in _QUERY.finditer(text):
        if secret_name(m.group("name")) and _masks(m.group("name"), m.group("value")):
            spans.append((m.start("value"), m.end("value")))
    for m in _ASSIGNMENT.finditer(text):
        value = m.group("value")
        name = m.group("name")
        if m.group("sep").strip() == "" and not name.startswith("-"):
            continue  # ``--token X`` is an option and its value; ``token X`` is prose
        if _PLAIN_NAME.match(name) and secret_name(name) and _masks(name, value.strip("\"'")) and value != REDACTED and not _AUTH_SCHEME.match(text, m.start("value")):
            if value[:1] in "\"'" and len(value) >= 2:
                spans.append((m.start("value") + 1, m.end("value") - 1))
            else:
                spans.append((m.start("value"), m.end("value")))
    for m in _QUOTED_KEY.finditer(text):
        name, value = m.group("name"), m.group("value")
        if secret_name(name) and name.lower() not in _FORMAT_KEYS and _masks(name, value.strip("\"'")):
            quoted = value[:1] in "\"'" and len(value) >= 2
            spans.append((m.start("value") + quoted, m.end("value") - quoted))
    for m in _HEADER.finditer(text):
        name = m.group("name")
        if m.group("value") and secret_name(name) and name.lower() not in _FORMAT_KEYS and _masks(name, m.group("value")):
            spans.append((m.start("value"), m.end("value")))
    for m in _WORD.finditer(text):
        if secret_value(m.group()):
            spans.append((m.start(), m.end()))
    return _mask_spans(text, spans) if spans else text


def redact_value(value) -> str:
    """``value`` as text with every credential in it masked."""
    return redact_text(str(value))


def redact_argv(argv) -> list:
    """A command line as records keep it: the value after a credential-named option masked
    (``--password X``, ``--api-token X``), and every argument through :func:`redact_text`."""
    out, hide_next = [], False
    for arg in argv:
        arg = str(arg)
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = arg.startswith("-") and "=" not in arg and secret_name(arg)
        out.append(redact_text(arg))
    return out


def redact(doc, _key: str = ""):
    """``doc`` (a JSON-like document, a text, a list) with every credential masked: the value of
    a credential-named key, and any credential-looking text anywhere (:func:`redact_text`).
    What every writer of a record applies to what it writes."""
    named = bool(_key) and secret_name(_key) and _key.lower() not in _FORMAT_KEYS
    if isinstance(doc, str):
        return REDACTED if named and _masks(_key, doc) else redact_text(doc)
    if isinstance(doc, dict):
        return {k: redact(v, k if isinstance(k, str) else "") for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        items = [redact(v) for v in doc]
        if doc and all(isinstance(v, str) for v in doc) and any(str(v).startswith("-") for v in doc):
            items = redact_argv(items)  # a command line: ``--token X``
        return type(doc)(items) if isinstance(doc, tuple) else items
    return REDACTED if named and _masks(_key, doc) else doc


def safe_environment(env: dict) -> dict:
    """``env`` without credential-looking names, and with credential-looking values redacted."""
    return {k: redact_value(v) for k, v in env.items() if not secret_name(k)}


def credential_in(key: str, value: str) -> str:
    """Why ``key=value`` must not be recorded, or '' when it may."""
    if secret_name(key):
        return f"{key} looks like a credential"
    if redact_text(str(value)) != str(value):
        return f"the value of {key} looks like a credential"
    return ""
