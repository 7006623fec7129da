"""Whether one request uses the cache: a pure decision over the alias default and the caller's header.

- `x-llmgw-cache: off` always bypasses (read and write);
- `x-llmgw-cache: on` opts the request in, even when it samples (temperature > 0): the caller says
  a stored answer is fine;
- no header: the alias default; `deterministic` caches requests with temperature 0 or a seed only,
  so a sampled answer is never repeated unless asked;
- an alias without a cache block is never cached, whatever the header says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from cache.key import is_deterministic

Header = Literal["on", "off"] | None
HEADER_VALUES: dict[bytes, Header] = {b"on": "on", b"off": "off"}


def uses_cache(
    alias_default: Literal["deterministic", "off"] | None, header: Header, body: Mapping[str, Any]
) -> bool:
    if alias_default is None or header == "off":
        return False
    if header == "on":
        return True
    return alias_default == "deterministic" and is_deterministic(body)
