"""JSON encoding for handler results (dict or list -> application/json).

orjson is used when installed (several times faster); otherwise the standard
library, configured for compact output.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> bytes:
    """Encodes ``value`` as compact UTF-8 JSON."""
    if orjson is not None:
        return orjson.dumps(value)
    return _encoder.encode(value).encode()
