"""Deterministic pseudo-text: what a simulated model "says".

Each choice gets its own `random.Random`, seeded from the prompt and either the request `seed`, nothing
(greedy, temperature 0: the prompt alone decides, like argmax decoding) or a draw from the server's RNG.
Words come from a fixed vocabulary of <= 4-letter words and are emitted with a leading space, so every
emitted piece is exactly one token of `tokenizer.tokenize` and `completion_tokens` equals the re-tokenized
text length. The answer length is log-normal (a sampled EOS) unless `max_tokens`/`ignore_eos` caps it.
Structured output (`response_format` JSON, forced tool calls) is built from the JSON schema when one is
given, then tokenized with the same tokenizer.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from eval.sim.tokenizer import tokenize

VOCAB = (
    "the of and to in is that it for on with as was at by be this are from or an have not they but "
    "one all we can has had more will if out so up what its our into them then time only new some "
    "make like now over also back use two way how work well may need such over take find each long "
    "day fact case week part eye life hand data run plan node fast slow load core unit test rate "
    "base high low open road city tree rock sun rain wind fire gold blue red seed leaf bird fish"
).split()
_PUNCT = (".", ",")


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    # An auto tool call (vLLM's tool parser): the call's first token streams the name alone and the
    # unary content is null; a forced call (guided decoding) streams the name with the first arguments.
    auto: bool = False


@dataclass(slots=True)
class Generated:
    """One choice's answer. `pieces` are the per-token text deltas (the last may be cut by a stop string);
    the first `reasoning_len` of them are reasoning (vLLM's `reasoning` field), the rest the content or,
    with `tool_call`, the call (an auto call's first piece is its name)."""

    pieces: list[str]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    tool_call: ToolCall | None = None
    reasoning_len: int = 0

    @property
    def text(self) -> str:
        if self.reasoning_len:
            return "".join(self.pieces[self.reasoning_len :])
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str | None:
        return "".join(self.pieces[: self.reasoning_len]) if self.reasoning_len else None

    @property
    def engine_reason(self) -> str:
        # vLLM's request_success counter knows stop/length; a tool call ends on a stop token.
        return "length" if self.finish_reason == "length" else "stop"


def words(rng: random.Random, n: int) -> list[str]:
    """`n` one-token pieces: words with a leading space, occasional punctuation."""
    out = [" " + w for w in rng.choices(VOCAB, k=n)]
    for i in range(7, n, 11):  # a sprinkle of punctuation keeps it text-like at no per-token RNG cost
        out[i] = _PUNCT[i % 2]
    if out:
        out[0] = out[0][1:]
    return out


def sample_length(rng: random.Random, mean: float, sigma: float) -> int:
    mu = math.log(mean) - sigma * sigma / 2.0  # so that E[length] = mean
    return max(1, round(rng.lognormvariate(mu, sigma)))


def fill_schema(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value conforming to the simple parts of a JSON schema (type/properties/items/enum)."""
    if not isinstance(schema, dict):
        return "".join(words(rng, 3))
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return rng.choice(schema["enum"])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props = schema.get("properties")
        if not isinstance(props, dict) or not props or depth > 3:
            return {"answer": "".join(words(rng, 4))}
        return {str(k): fill_schema(v, rng, depth + 1) for k, v in props.items()}
    if kind == "array":
        return [fill_schema(schema.get("items", {}), rng, depth + 1) for _ in range(rng.randint(1, 3))]
    if kind == "integer":
        return rng.randint(0, 100)
    if kind == "number":
        return round(rng.uniform(0, 100), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return "".join(words(rng, rng.randint(1, 5)))


def cut_at_stop(pieces: list[str], stops: list[str]) -> list[str] | None:
    """Pieces up to and including the token that completes the earliest stop string, with the text cut
    before the stop string (vLLM's default `include_stop_str_in_output=False`); None if no stop occurs."""
    text = "".join(pieces)
    best = -1
    best_stop = ""
    for s in stops:
        i = text.find(s) if s else -1
        if i >= 0 and (best < 0 or i < best):
            best, best_stop = i, s
    if best < 0:
        return None
    end = best + len(best_stop)
    out: list[str] = []
    pos = 0
    for piece in pieces:
        start = pos
        pos += len(piece)
        out.append(piece[: max(0, best - start)] if pos > best else piece)
        if pos >= end:
            break
    return out


def limit(pieces: list[str], max_tokens: int, reason: str) -> tuple[list[str], str]:
    if len(pieces) > max_tokens:
        return pieces[:max_tokens], "length"
    return pieces, reason


def generate_text(
    rng: random.Random,
    *,
    max_tokens: int,
    mean: float,
    sigma: float,
    ignore_eos: bool = False,
    min_tokens: int = 0,
    stops: list[str] | None = None,
    fixed: str | None = None,
) -> Generated:
    """Free text, or `fixed` (a replayed answer) cut to `max_tokens`; then stop strings apply."""
    if fixed is not None:
        pieces, reason = limit(tokenize(fixed), max_tokens, "stop")
        if not pieces:  # an empty recorded answer still costs one (EOS) token
            pieces = [""]
    else:
        n = max_tokens if ignore_eos else max(min_tokens, sample_length(rng, mean, sigma))
        reason = "length" if n >= max_tokens else "stop"
        pieces = words(rng, min(n, max_tokens))
    if stops:
        cut = cut_at_stop(pieces, stops)
        if cut is not None:
            return Generated(cut, "stop")
    return Generated(pieces, reason)


def generate_json(rng: random.Random, schema: Any, max_tokens: int) -> Generated:
    pieces, reason = limit(tokenize(orjson.dumps(fill_schema(schema, rng)).decode()), max_tokens, "stop")
    return Generated(pieces, reason)


def generate_tool_call(
    rng: random.Random, name: str, parameters: Any, max_tokens: int, call_id: str
) -> Generated:
    arguments = orjson.dumps(fill_schema(parameters or {"type": "object"}, rng)).decode()
    pieces, reason = limit(tokenize(arguments), max_tokens, "tool_calls")
    return Generated(pieces, reason, ToolCall(call_id, name, "".join(pieces)))


def generate_auto_tool_call(name: str, arguments: Any, max_tokens: int, call_id: str) -> Generated:
    """A call the model chose to make (tool_choice auto): one token for the name, then the arguments'
    JSON; cut by `max_tokens` it ends with `length` and truncated arguments, as a real model's would."""
    pieces, reason = limit([name, *tokenize(orjson.dumps(arguments).decode())], max_tokens, "tool_calls")
    return Generated(pieces, reason, ToolCall(call_id, name, "".join(pieces[1:]), auto=True))


def token_logprobs(
    rng: random.Random, pieces: list[str], top: int
) -> list[tuple[float, list[tuple[str, float]]]]:
    """Per token: its logprob and the `top` most likely alternatives (the sampled token first)."""
    out: list[tuple[float, list[tuple[str, float]]]] = []
    for piece in pieces:
        lp = -round(rng.expovariate(3.0), 4)
        alts: list[tuple[str, float]] = []
        if top:
            alts.append((piece, lp))
            prev = lp
            for w in rng.sample(VOCAB, top - 1):
                prev = round(prev - rng.expovariate(1.0) - 0.01, 4)
                alts.append((" " + w, prev))
        out.append((lp, alts))
    return out


def piece_id(piece: str) -> int:
    """A stable pseudo token id for a piece (the simulator has no vocabulary of ids)."""
    return zlib.crc32(piece.encode()) % 32000


def prompt_logprobs(rng: random.Random, pieces: list[str], top: int) -> list[dict[str, Any] | None]:
    """vLLM's `prompt_logprobs`: None for the first prompt token, then per token a dict keyed by token id
    of {logprob, rank, decoded_token}: the prompt's own token (at its rank) and the `top` most likely."""
    out: list[dict[str, Any] | None] = [None]
    for piece in pieces[1:]:
        rank = 1 + int(rng.expovariate(0.2))
        entry: dict[str, Any] = {}
        lp = 0.0
        for r in range(1, top + 1):
            lp = round(lp - rng.expovariate(1.0) - 0.01, 4)
            alt = piece if r == rank else " " + rng.choice(VOCAB)
            entry.setdefault(str(piece_id(alt)), {"logprob": lp, "rank": r, "decoded_token": alt})
        own = str(piece_id(piece))
        if own not in entry:
            entry[own] = {"logprob": round(lp - 1.0 - rank * 0.1, 4), "rank": rank, "decoded_token": piece}
        out.append(entry)
    return out
