"""A tiny authoritative DNS server on UDP for discovery tests (dnspython wire format, in a thread).

`records` maps a name ("vllm.test.") to its addresses; changing it changes the next answers.
Unknown names get NXDOMAIN, like a headless Service with no ready pod.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset


def _answer(query: dns.message.Message, records: dict[str, list[str]]) -> bytes:
    resp = dns.message.make_response(query)
    resp.flags |= dns.flags.AA
    q = query.question[0]
    addresses = records.get(q.name.to_text().lower())
    if addresses is None:
        resp.set_rcode(dns.rcode.NXDOMAIN)
        return bytes(resp.to_wire())
    want = "AAAA" if q.rdtype == dns.rdatatype.AAAA else "A" if q.rdtype == dns.rdatatype.A else None
    matching = [a for a in addresses if (":" in a) == (want == "AAAA")] if want else []
    if matching:
        resp.answer.append(dns.rrset.from_text_list(q.name, 1, "IN", want or "A", matching))
    return bytes(resp.to_wire())


@contextmanager
def dns_server() -> Iterator[tuple[int, dict[str, list[str]]]]:
    """Serve until the block ends; yields (port, records)."""
    records: dict[str, list[str]] = {}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            try:
                sock.sendto(_answer(dns.message.from_wire(data), dict(records)), peer)
            except Exception:  # noqa: BLE001 - a malformed query must not stop the server
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], records
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()
