"""Keys and values MLflow accepts, made deterministically from any param, metric or tag, so a run never crashes
because of a param value or a metric name (the in-process log and the stage's side of a sidecar run both use
these)."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from typing import Any

from tasks.common.nested import flatten

MAX_PARAM_VALUE = 6000  # MLflow's limit on a param value, characters
MAX_KEY = 250  # MLflow's limit on a param, metric or tag key, characters
_KEY_OK = re.compile(r"[^0-9A-Za-z_\-. /:]")


def sanitize_key(key: str) -> str:
    """A key MLflow accepts: bad characters become ``_``, and so does every path segment a store would read as
    a path (empty: ``labels/``, ``a//b``, a leading ``/``; ``.`` or ``..``: ``a/../b``); a changed or too-long
    key gets an 8-hex md5 suffix.

    The suffix hashes the original key, so two different keys never collide after sanitizing.
    """
    segments = _KEY_OK.sub("_", str(key)).split("/")
    clean = "/".join("_" if segment in ("", ".", "..") else segment for segment in segments)
    if clean == key and len(clean) <= MAX_KEY:
        return clean
    digest = hashlib.md5(str(key).encode("utf-8")).hexdigest()[:8]
    return f"{clean[: MAX_KEY - 10]}-h{digest}"


def sanitize_value(value: Any) -> str:
    """A param value as a string of at most ``MAX_PARAM_VALUE`` chars (long ones end in ``...md5:<hex>``)."""
    text = str(value)
    if len(text) <= MAX_PARAM_VALUE:
        return text
    digest = hashlib.md5(text.encode("utf-8")).hexdigest()
    return f"{text[: MAX_PARAM_VALUE - 40]}...md5:{digest}"


def numeric_leaves(tree: Mapping[str, Any]) -> dict[str, float]:
    """The finite int/float/bool leaves of a nested mapping, flattened with ``/`` (what MLflow can plot)."""
    out = {}
    for key, value in flatten(tree, sep="/").items():
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            out[key] = float(value)
    return out
