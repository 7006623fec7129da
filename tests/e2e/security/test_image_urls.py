"""Image URLs cannot turn the pool into the client's fetcher (issue 39: `http://169.254.169.254/...`,
`file://` and loopback URLs reached the pool untouched). Through the real gateway and a simulator, with
the default policy (`images.mode: https_only`) and an alias that denies images."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.procs import free_port
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

REFUSED = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "https://169.254.169.254/latest/meta-data/",
    "https://[::ffff:169.254.169.254]/",
    "https://2852039166/",  # 169.254.169.254 as one number
    "https://0xa9fea9fe/",
    "file:///etc/passwd",
    "https://127.0.0.1:8080/admin",
    "https://127.1/",
    "https://localhost/x.png",
    "https://[::1]/x.png",
    "https://10.0.0.5/x.png",
    "https://192.168.1.1/x.png",
    "https://metadata.google.internal/computeMetadata/v1/",
    "https://kubernetes.default.svc.cluster.local/",
    "http://example.com/cat.png",  # https_only
    "gopher://example.com/",
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("image-urls")
    port = free_port()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: p, model: sim, endpoints: {{static: ["http://127.0.0.1:{port}"]}}}}
models:
  - {{name: m, route: {{pool: p}}}}
  - {{name: text-only, route: {{pool: p}}, images: {{mode: deny}}}}
tenancy: {{auth: disabled}}
"""
    )
    with Stack(tmp) as s:
        s.sim("sim", "--profile", "instant", port=port)
        yield s.gateway(policy).url


def _ask(url: str, model: str, image: str) -> httpx.Response:
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": image}}]
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)


@pytest.mark.parametrize("image", REFUSED)
def test_urls_the_pool_must_not_fetch_are_refused(gateway: str, image: str) -> None:
    resp = _ask(gateway, "m", image)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "image_url_not_allowed"
    assert error["param"] == "messages[0].content[1].image_url.url"


@pytest.mark.parametrize("image", ["https://example.com/cat.png", "data:image/png;base64,iVBORw0KGgo="])
def test_public_https_and_inline_images_reach_the_pool(gateway: str, image: str) -> None:
    resp = _ask(gateway, "m", image)
    # The simulator serves a text-only model: it refuses image parts itself (as vLLM does), so what
    # shows the gateway let the URL through is the pool's answer, not the gateway's refusal.
    assert resp.status_code == 200 or "pool 'p' rejected the request" in resp.text, resp.text
    assert "image_url_not_allowed" not in resp.text


def test_an_alias_can_deny_images(gateway: str) -> None:
    resp = _ask(gateway, "text-only", "data:image/png;base64,iVBORw0KGgo=")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "image_url_not_allowed"
