"""Stage 3, normalize: the image URLs of a chat request's content parts against the alias's
`images` policy (gateway.config.ImageUrls), before any pool call.

The pool fetches an image URL from its own network, so a URL naming cloud metadata
(`http://169.254.169.254/...`), loopback, a private range or `file://` would make the pool fetch it
for the client (SSRF). Checked here: the scheme (`data:` is inline and always allowed but under
`deny`; `https` only under `https_only`), host names that only mean something inside a network
(`localhost`, `*.localhost`, `*.local`, `*.internal`, `metadata`), and literal addresses in any form a
fetcher accepts (`inet_aton` shorthands such as `2852039166`, `0xa9fea9fe`, `127.1`; IPv4-mapped IPv6)
against the blocked networks. Host names are not resolved: a public name pointing at a private
address is the pool network's egress policy's to stop (the chart's NetworkPolicy), not the gateway's.
"""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from gateway.config import ImageUrls
from gateway.errors import InvalidRequestError

__all__ = ["check_image_part"]

MAX_URL_CHARS = 8192  # a non-data image URL; data: URLs are bounded by the body size
_LOCAL_NAMES = ("localhost", "metadata", "metadata.google.internal")
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal")
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=64)
def _networks(blocked: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(n, strict=False) for n in blocked)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a literal host names, in any form a fetcher would accept; None for a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:  # libc's parser: 127.1, 2852039166, 0x7f.0.0.1, 0177.0.0.1
            ip = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _refused(where: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{where}: {why} (this model's images policy)", param=where, code="image_url_not_allowed"
    )


def check_image_url(url: Any, policy: ImageUrls, where: str) -> None:
    if not isinstance(url, str):
        raise InvalidRequestError(f"{where} must be a string", param=where, code="invalid_type")
    if policy.mode == "deny":
        raise _refused(where, "image inputs are not accepted")
    if url[:5].lower() == "data:":
        return
    if len(url) > MAX_URL_CHARS:
        raise _refused(where, f"an image URL longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise _refused(where, "not a valid URL") from None
    scheme = parts.scheme.lower()
    allowed = ("https",) if policy.mode == "https_only" else ("http", "https")
    if scheme not in allowed:
        raise _refused(where, f"only {' and '.join(allowed)} (or data:) image URLs are accepted")
    if not host:
        raise _refused(where, "an image URL without a host")
    host = host.rstrip(".")
    if host in _LOCAL_NAMES or host.endswith(_LOCAL_SUFFIXES):
        raise _refused(where, "an image URL naming a local host")
    ip = _address(host)
    if ip is not None and any(ip in net for net in _networks(policy.blocked_networks)):
        raise _refused(where, "an image URL naming a blocked network")


def check_image_part(part: dict[str, Any], policy: ImageUrls, where: str) -> None:
    """An `image_url` content part (`{"image_url": {"url": ...}}`, or the URL as a bare string)."""
    image = part.get("image_url")
    if isinstance(image, dict):
        check_image_url(image.get("url"), policy, f"{where}.image_url.url")
    else:
        check_image_url(image, policy, f"{where}.image_url")
