"""What each request is: lengths sampled from the workload's distributions, synthetic or dataset prompts,
its tenant, alias, streaming flag and SLO class, and the JSON body ready to send.

Determinism: request `i` depends only on the workload seed and `i`, never on the offered rate or on
timing, because the content generator draws from its own `random.Random` in request order. A sweep
therefore sends the same requests at every load level, and two runs with one seed send the same bytes.

Synthetic text is a sequence of short common English words, one token each in a BPE vocabulary and in
the simulator's tokenizer (<= 4 word characters per piece), so "N tokens" is roughly N words. Each
request starts with a distinct word sequence, so only an intended shared prefix hits a prefix cache.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from eval.loadgen.workload import Choice, Fixed, Length, LogNormal, Uniform, Workload

# Short, common words: each is a single token for BPE tokenizers and for the simulator's tokenizer.
_WORDS = (
    "the of and to in is that it for was on are as with his they at be this from have or by one had not "
    "but what all were when we there can an your which their said if do will each about how up out them "
    "then she many some so these would other into has more her two like him see time could no make than "
    "first been its who now long down day did get come made may part over new sound take only little work "
    "know place year live me back give most very after our just name good man think say great where help "
    "line turn much mean move right boy old too same tell does set three want air well also play small end "
    "put home read hand port large add even land here must big high such why ask men went ear kind"
).split()


def sample_length(dist: Length, rng: random.Random) -> int:
    if isinstance(dist, Fixed):
        return dist.value
    if isinstance(dist, Uniform):
        return rng.randint(dist.min, dist.max)
    if isinstance(dist, LogNormal):
        # mean of a log-normal is exp(mu + sigma^2 / 2): solve for mu so `mean` is the real mean.
        mu = math.log(dist.mean) - dist.sigma * dist.sigma / 2
        return max(dist.min, min(dist.max, round(rng.lognormvariate(mu, dist.sigma))))
    if isinstance(dist, Choice):
        return rng.choices(dist.values, weights=dist.weights)[0]
    raise TypeError(f"unknown length distribution {dist!r}")


def synth_text(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choices(_WORDS, k=tokens))


def load_prompts(path: Path, limit: int | None) -> list[str]:
    """The `prompt` field of each line of a routing JSONL file (shared/data/routing/README.md)."""
    prompts: list[str] = []
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: invalid JSON: {exc}") from exc
            prompt = row.get("prompt") if isinstance(row, dict) else None
            if not isinstance(prompt, str) or not prompt:
                raise ValueError(f"{path}:{n}: no string field 'prompt'")
            prompts.append(prompt)
            if limit is not None and len(prompts) >= limit:
                break
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


@dataclass(frozen=True, slots=True)
class RequestSpec:
    index: int
    target: int  # index into target.base_urls (round-robin)
    alias: str
    tenant: str | None
    key: str | None
    stream: bool
    prefix_group: int | None
    max_tokens: int
    slo_class: str | None
    body: bytes


class Planner:
    """Produces request `i` for i = 0, 1, 2, ... (call `next()` in order)."""

    def __init__(self, workload: Workload, prompts: Sequence[str] | None = None) -> None:
        self._w = workload
        self._rng = random.Random(f"{workload.seed}:content")
        self._prompts = prompts
        self._index = 0
        prefix = workload.requests.prefix
        # Group prefixes come from their own seeded stream so that they do not shift request content.
        prefix_rng = random.Random(f"{workload.seed}:prefix")
        self._prefixes = (
            [
                f"You are assistant {g}. " + synth_text(prefix_rng, max(prefix.tokens - 5, 1))
                for g in range(prefix.groups)
            ]
            if prefix is not None
            else []
        )
        self._keys = [(t.name, t.resolve_key()) for t in workload.tenants]
        self._tenant_weights = [t.weight for t in workload.tenants]
        self._alias_names = [a.name for a in workload.aliases]
        self._alias_weights = [a.weight for a in workload.aliases]

    def next(self) -> RequestSpec:
        w, rng, i = self._w, self._rng, self._index
        self._index += 1
        req = w.requests
        # Every draw happens whether or not it is used, so request i+1 never depends on request i's branch.
        alias = rng.choices(self._alias_names, weights=self._alias_weights)[0]
        tenant_at = (
            rng.choices(range(len(self._keys)), weights=self._tenant_weights)[0] if self._keys else None
        )
        stream = rng.random() < req.stream_share
        in_group = rng.random() < (req.prefix.share if req.prefix is not None else 0.0)
        group = rng.randrange(len(self._prefixes)) if self._prefixes else 0
        prompt_len = sample_length(req.prompt_tokens, rng)
        max_tokens = sample_length(req.output_tokens, rng)
        pick = rng.randrange(len(self._prompts)) if self._prompts else 0
        text_seed = rng.getrandbits(64)
        if self._prompts:
            user = self._prompts[pick]
        else:
            user = synth_text(random.Random(text_seed), prompt_len)
        system = self._prefixes[group] if (in_group and self._prefixes) else None
        body = render_body(w.target.api, alias, system, user, max_tokens, stream, req.ignore_eos)
        tenant, key = self._keys[tenant_at] if tenant_at is not None else (None, None)
        return RequestSpec(
            index=i,
            target=i % len(w.target.base_urls),
            alias=alias,
            tenant=tenant,
            key=key,
            stream=stream,
            prefix_group=group if system is not None else None,
            max_tokens=max_tokens,
            slo_class=w.slo_for(alias),
            body=body,
        )


def render_body(
    api: str, alias: str, system: str | None, user: str, max_tokens: int, stream: bool, ignore_eos: bool
) -> bytes:
    body: dict[str, object] = {"model": alias, "max_tokens": max_tokens, "stream": stream}
    if api == "chat":
        messages = [{"role": "system", "content": system}] if system is not None else []
        messages.append({"role": "user", "content": user})
        body["messages"] = messages
    else:
        body["prompt"] = f"{system}\n\n{user}" if system is not None else user
    if stream:
        # Usage (token counts) arrives in a final chunk only when asked for.
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    return orjson.dumps(body)


def arrival_times(
    kind: str, rate: float, seed: int, duration_s: float | None, count: int | None
) -> list[float]:
    """Open-loop send times in seconds from the start: Poisson (exponential gaps) or constant spacing.

    Stops at `duration_s` or after `count` arrivals, whichever comes first; the stream depends only on
    (kind, rate, seed), so a shorter run is a prefix of a longer one.
    """
    if duration_s is None and count is None:
        raise ValueError("arrival_times needs a duration or a count")
    rng = random.Random(f"{seed}:arrivals")
    out: list[float] = []
    t = 0.0
    while count is None or len(out) < count:
        if kind == "poisson":
            t += rng.expovariate(rate)
        elif kind == "constant":
            t = len(out) / rate
        else:
            raise ValueError(f"unknown arrival process {kind!r}")
        if duration_s is not None and t >= duration_s:
            break
        out.append(t)
    return out
