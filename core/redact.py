"""What of the environment may go into records (meta.json, campaign.json, report.md), which
are meant to be shared: never a variable whose name looks like a credential, and never a value
that looks like one."""
from __future__ import annotations

import math
import re
from collections import Counter

REDACTED = "<redacted>"

#: parts of a variable name that mark a credential (``NVIDIA_API_KEY``, ``HF_TOKEN``,
#: ``DB_PASSWORD``, ``TORCH_HUB_AUTH``, ``SESSION_COOKIE``).
_SECRET_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH",
                 "COOKIE", "PRIVATE", "SIGNATURE")
#: whole words of a name that do (``DB_PWD``, ``GITLAB_PAT``); as parts they would hit other
#: names. ``PASS`` is no such word: ``LLVM_PASS_PLUGIN_PATH`` changes what is compiled.
_SECRET_WORDS = {"PWD", "PAT", "SESSION"}

#: prefixes of well-known token formats (NVIDIA, Hugging Face, GitHub, OpenAI-style, Slack,
#: GitLab, AWS, Google).
_TOKEN_PREFIX = re.compile(r"^(nvapi-|hf_|gh[pousr]_|github_pat_|sk-|xox[abprs]-|glpat-|AKIA|ASIA|AIza)", re.I)
#: ``scheme://user:password@host``.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<password>[^/\s@]+)(?P<tail>@)", re.I)
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_+=.~-]{24,}$")
#: device ids look random too: ``GPU-5f7b2d1e-…`` (CUDA_VISIBLE_DEVICES), hex hashes.
_DEVICE_ID = re.compile(r"^((GPU|MIG)-)*[0-9a-f-]+(/\d+)*$", re.I)


def secret_name(name: str) -> bool:
    upper = name.upper()
    return any(p in upper for p in _SECRET_PARTS) or bool(_SECRET_WORDS & set(upper.split("_")))


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def secret_value(value: str) -> bool:
    """A value shaped like a credential: a known token prefix, or one long random-looking word
    (mixed case and digits, high entropy; a hex hash or a path is not one)."""
    value = str(value).strip()
    if _TOKEN_PREFIX.match(value) and len(value) >= 8:
        return True
    if not _TOKEN_CHARS.match(value) or _DEVICE_ID.match(value):
        return False
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value) and any(c.isdigit() for c in value)
    return mixed and _entropy(value) >= 4.0


def redact_value(value) -> str:
    """``value`` with a credential-looking value replaced and URL passwords masked."""
    text = str(value)
    if secret_value(text):
        return REDACTED
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{REDACTED}{m.group('tail')}", text)


def safe_environment(env: dict) -> dict:
    """``env`` without credential-looking names, and with credential-looking values redacted."""
    return {k: redact_value(v) for k, v in env.items() if not secret_name(k)}


def credential_in(key: str, value: str) -> str:
    """Why ``key=value`` must not be recorded, or '' when it may."""
    if secret_name(key):
        return f"{key} looks like a credential"
    if secret_value(value) or _URL_PASSWORD.search(str(value)):
        return f"the value of {key} looks like a credential"
    return ""
