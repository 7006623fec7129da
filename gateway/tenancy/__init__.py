"""Who is calling: API keys (`keys`: format, hashing, stores), authentication (`auth`), the admin
API (`admin`) and `llmgw keys` (`keys_cli`). Re-exported: the authenticator and the key store types;
`admin` is not (it loads FastAPI).
"""

from __future__ import annotations

from gateway.tenancy.auth import Authenticator, Principal

__all__ = ["Authenticator", "Principal"]
