"""Parse OpenAI chat/completions bodies into a `Job`: prompts, token counts and the pre-generated answers.

vLLM validates with pydantic models that allow extra fields; here a few hand-written checks on the
decoded dict are much cheaper and give the same outcome for the fields the simulator honours (unknown
fields are ignored). The whole answer of every choice is generated up front (it is deterministic), so
the engine only has to pace the tokens; `Job` keeps everything the response renderer needs.
"""

from __future__ import annotations

import random
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from eval.sim import agent
from eval.sim.adapters import AdapterRegistry
from eval.sim.errors import ApiError, bad_request, invalid_value, validation_error
from eval.sim.profile import SimProfile
from eval.sim.replay import ReplayIndex
from eval.sim.textgen import (
    Generated,
    generate_auto_tool_call,
    generate_json,
    generate_text,
    generate_tool_call,
    limit,
    piece_id,
    prompt_logprobs,
    token_logprobs,
)
from eval.sim.tokenizer import block_hashes, tokenize


@dataclass(slots=True)
class Prompt:
    pieces_len: int
    hashes: list[int]
    logprobs: list[dict[str, Any] | None] | None = None  # vLLM's prompt_logprobs, when asked for


@dataclass(slots=True)
class Job:
    kind: str  # "chat" | "completion"
    request_id: str
    created: int
    model: str
    prompts: list[Prompt]
    n: int
    choices: list[Generated]  # prompt-major: choice i belongs to prompts[i // n]
    stream: bool
    include_usage: bool
    continuous_usage: bool
    top_logprobs: int | None  # None: no logprobs; else alternatives per token
    logprobs: list[list[tuple[float, list[tuple[str, float]]]]] = field(default_factory=list)
    replay_hit: bool | None = None  # None: replay mode off
    prompt_tokens_details: bool = False  # usage reports cached_tokens (else prompt_tokens_details: null)
    lora: str | None = None  # the adapter that answers (None: the base model)
    reasoning_details: bool = False  # a reasoning parser runs: usage reports reasoning_tokens


@dataclass(slots=True)
class Context:
    """What parsing needs from the server; `rng` draws seeds for requests without one."""

    profile: SimProfile
    served_names: tuple[str, ...]
    replay: ReplayIndex | None
    rng: random.Random
    id_prefix: str
    counter: int = 0
    prompt_tokens_details: bool = False  # vLLM's --enable-prompt-tokens-details
    adapters: AdapterRegistry | None = None  # with --enable-lora
    tool_call_rate: float = 0.0  # --tool-call-rate: unprompted calls of an offered tool (agent.py)
    reasoning_parser: str | None = None  # vLLM's --reasoning-parser: thinking when a request asks

    def next_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.id_prefix}{self.counter:010x}"


def decode_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise validation_error(
            "json_invalid", f"body.{exc.pos}", "JSON decode error", {}, {"error": exc.msg}
        ) from exc
    if not isinstance(body, dict):
        raise validation_error(
            "model_attributes_type",
            "body",
            "Input should be a valid dictionary or object to extract fields from",
            body,
        )
    return body


def check_model(ctx: Context, body: dict[str, Any]) -> str:
    """The name the answer carries: the first served name, or the adapter's (vLLM echoes its name)."""
    model = body.get("model")
    if model is None:  # vLLM serves its default model when `model` is omitted
        return ctx.served_names[0]
    if ctx.adapters is not None and model in ctx.adapters:
        return str(model)
    if model not in ctx.served_names:
        aliases = ", ".join(ctx.served_names)
        raise ApiError(404, f"The model `{model}` does not exist. Valid aliases: {aliases}.", "model")
    return ctx.served_names[0]


def _int(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise validation_error("int_type", f"body.{key}", "Input should be a valid integer", v)
    if v < lo:
        raise invalid_value(f"{key} must be at least {lo}, got {v}.", key, v)
    if hi is not None and v > hi:
        raise invalid_value(f"{key} must be at most {hi}, got {v}.", key, v)
    return v


def _logprobs(body: dict[str, Any], key: str, kind: str = "sample") -> int:
    v = _int(body, key, 0, 0) or 0
    if v > _MAX_LOGPROBS:
        raise invalid_value(
            f"Requested {kind} logprobs of {v}, which is greater than max allowed: {_MAX_LOGPROBS}",
            "logprobs" if kind == "sample" else f"{kind}_logprobs",
            v,
        )
    return v


_MAX_LOGPROBS = 20  # vLLM's default --max-logprobs


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    raise bad_request("stop must be a string or a list of strings", "stop")


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool, bool]:
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options")
    if opts is None or not stream:
        return stream, False, False
    if not isinstance(opts, dict):
        raise bad_request("stream_options must be an object", "stream_options")
    # vLLM's should_include_usage: an explicit stream_options turns usage on unless include_usage is false.
    include = bool(opts.get("include_usage", True))
    return stream, include, include and bool(opts.get("continuous_usage_stats", False))


# Content parts a text-only model cannot take: vLLM 0.32 refuses them ("<model> is not a multimodal model").
_MEDIA_PARTS = frozenset({"image_url", "input_audio", "video_url", "audio_url", "image", "image_embeds"})


def _text_of(content: Any, model: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if any(isinstance(p, dict) and p.get("type") in _MEDIA_PARTS for p in content):
            raise bad_request(f"{model} is not a multimodal model")
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    raise bad_request("message content must be a string or a list of content parts", "messages")


def render_chat(messages: Any, tools: Any, model: str = "model") -> tuple[str, str]:
    """The prompt string (a simple role-tag template) and the last user message (the replay key).
    `model`: the served name, for the refusal of media parts (the simulated model reads text only)."""
    if messages is None:
        raise validation_error("missing", "body.messages", "Field required", {})
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", "messages")
    parts: list[str] = []
    if tools:
        parts.append("<|tools|>\n" + orjson.dumps(tools).decode() + "\n")
    last_user = ""
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_request("each message must be an object with a string role", "messages")
        text = _text_of(m.get("content"), model)
        if m.get("tool_calls"):
            text += orjson.dumps(m["tool_calls"]).decode()
        if m["role"] == "user":
            last_user = text
        parts.append(f"<|{m['role']}|>\n{text}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts), last_user


def _max_tokens(ctx: Context, requested: int | None, param: str, prompt_len: int) -> int:
    """vLLM 0.32's output budget: `requested` over the context is a 400; a prompt over the context is a
    400; otherwise the output is quietly capped to what the context leaves (`finish_reason: length`)."""
    limit = ctx.profile.max_model_len
    if requested is not None and requested > limit:
        raise invalid_value(
            f"{param}={requested} cannot be greater than max_model_len={limit}. "
            "Please request fewer output tokens.",
            param,
            requested,
        )
    if prompt_len > limit:
        # vLLM's tokenizer stops at limit + 1 tokens, so a long text prompt reads "at least limit + 1".
        count = min(prompt_len, limit + 1)
        qualifier = "at least " if count == limit + 1 else ""
        raise invalid_value(
            f"This model's maximum context length is {limit} tokens. However, your prompt contains "
            f"{qualifier}{count} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            "input_tokens",
            count,
        )
    room = limit - prompt_len
    capped = room if requested is None else min(requested, room)
    if capped < 1:
        raise invalid_value(f"max_tokens must be at least 1, got {capped}.", "max_tokens", capped)
    return capped


def _choice_rng(ctx: Context, body: dict[str, Any], prompt: str, index: int) -> random.Random:
    temperature = body.get("temperature")
    seed = body.get("seed")
    if isinstance(temperature, int | float) and temperature == 0:
        return random.Random(zlib.crc32(prompt.encode()) * 131 + index)  # greedy: the prompt decides
    if isinstance(seed, int) and not isinstance(seed, bool):
        return random.Random((seed * 1_000_003 + zlib.crc32(prompt.encode())) * 131 + index)
    return random.Random(ctx.rng.getrandbits(64))


def _prompt(ctx: Context, text: str, top: int | None, salt: int = 0) -> Prompt:
    pieces = tokenize(text)
    prompt = Prompt(len(pieces), block_hashes(pieces, ctx.profile.block_size, salt=salt))
    if top is not None:
        prompt.logprobs = prompt_logprobs(random.Random(zlib.crc32(text.encode())), pieces, top)
    return prompt


def _answer(
    ctx: Context, body: dict[str, Any], rng: random.Random, max_tokens: int, fixed: str | None, chat: bool
) -> Generated:
    """One choice's answer; a chat request asking for thinking (with a reasoning parser on) gets a few
    reasoning tokens first, out of the same `max_tokens`."""
    if not (chat and ctx.reasoning_parser is not None and agent.wants_reasoning(body)):
        return _content(ctx, body, rng, max_tokens, fixed, chat)
    thoughts = agent.reasoning_pieces(rng)[:max_tokens]
    room = max_tokens - len(thoughts)
    gen = _content(ctx, body, rng, room, fixed, chat) if room > 0 else Generated([], "length")
    gen.pieces[:0] = thoughts
    gen.reasoning_len = len(thoughts)
    return gen


def _content(
    ctx: Context, body: dict[str, Any], rng: random.Random, max_tokens: int, fixed: str | None, chat: bool
) -> Generated:
    p = ctx.profile
    if chat and fixed is None:
        forced = _forced_tool(body)
        if forced is not None:
            name, params = forced
            return generate_tool_call(
                rng, name, params, max_tokens, f"chatcmpl-tool-{rng.getrandbits(64):016x}"
            )
        planned = agent.plan(body, rng, ctx.tool_call_rate)
        if isinstance(planned, agent.PlannedCall):
            call_id = f"chatcmpl-tool-{rng.getrandbits(64):016x}"
            return generate_auto_tool_call(planned.name, planned.arguments, max_tokens, call_id)
        if isinstance(planned, str):  # the closing answer after a tool result
            return Generated(*limit(tokenize(planned), max_tokens, "stop"))
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
            schema = (fmt.get("json_schema") or {}).get("schema") if fmt["type"] == "json_schema" else None
            return generate_json(rng, schema or {"type": "object"}, max_tokens)
    return generate_text(
        rng,
        max_tokens=max_tokens,
        mean=p.output_len_mean,
        sigma=p.output_len_sigma,
        ignore_eos=bool(body.get("ignore_eos", False)),
        min_tokens=_int(body, "min_tokens", 0, 0) or 0,
        stops=_stops(body),
        fixed=fixed,
    )


def _forced_tool(body: dict[str, Any]) -> tuple[str, Any] | None:
    """(name, parameters schema) when tool_choice forces a call ("required" or a named function)."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not isinstance(tools, list) or not tools:
        return None
    funcs = [t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if choice == "required" and funcs:
        return str(funcs[0].get("name", "tool")), funcs[0].get("parameters")
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        for f in funcs:
            if f.get("name") == name:
                return str(name), f.get("parameters")
        raise bad_request(f"tool_choice names an unknown function {name!r}", "tool_choice")
    return None


def _build(
    ctx: Context,
    body: dict[str, Any],
    kind: str,
    texts: list[tuple[str, str]],
    requested: tuple[int | None, str],
    top: int | None,
) -> Job:
    model = check_model(ctx, body)
    lora = None if model == ctx.served_names[0] else model
    # An adapter answers differently from the base model: its name seeds the text and keys its blocks.
    tag, salt = (f"<|lora:{lora}|>", zlib.crc32(lora.encode()) + 1) if lora else ("", 0)
    n = _int(body, "n", 1, 1, 128) or 1
    stream, include_usage, continuous = _stream_flags(body)
    prompts: list[Prompt] = []
    choices: list[Generated] = []
    logprobs: list[list[tuple[float, list[tuple[str, float]]]]] = []
    replay_hit: bool | None = None
    prompt_top = (
        _logprobs(body, "prompt_logprobs", "prompt") if body.get("prompt_logprobs") is not None else None
    )
    for prompt_text, key in texts:
        prompt = _prompt(ctx, prompt_text, prompt_top, salt)
        prompts.append(prompt)
        max_tokens = _max_tokens(ctx, requested[0], requested[1], prompt.pieces_len)
        # The recorded answers are the base model's: an adapter never replays them.
        fixed = ctx.replay.lookup(key) if ctx.replay is not None and lora is None else None
        if ctx.replay is not None:
            replay_hit = (replay_hit is not False) and fixed is not None
        for i in range(n):
            rng = _choice_rng(ctx, body, tag + prompt_text, i)
            gen = _answer(ctx, body, rng, max_tokens, fixed, kind == "chat")
            choices.append(gen)
            if top is not None:
                logprobs.append(token_logprobs(random.Random(rng.getrandbits(64)), gen.pieces, top))
    return Job(
        kind,
        ctx.next_id("chatcmpl" if kind == "chat" else "cmpl"),
        int(time.time()),
        model,
        prompts,
        n,
        choices,
        stream,
        include_usage,
        continuous,
        top,
        logprobs,
        replay_hit,
        ctx.prompt_tokens_details,
        lora,
        kind == "chat" and ctx.reasoning_parser is not None,
    )


def parse_chat(ctx: Context, body: dict[str, Any]) -> Job:
    prompt, last_user = render_chat(body.get("messages"), body.get("tools"), ctx.served_names[0])
    param = "max_completion_tokens"
    requested = _int(body, param, None, 1)
    if requested is None:
        param = "max_tokens"
        requested = _int(body, param, None, 1)
    top: int | None = None
    if body.get("logprobs"):
        top = _logprobs(body, "top_logprobs")
    return _build(ctx, body, "chat", [(prompt, last_user)], (requested, param), top)


def _ids_text(ids: list[Any]) -> str:
    """Token ids as text of exactly one piece per id (vLLM counts a token-id prompt as given): each id
    in base 36, at most 4 word characters below 36**4 (every real vocabulary is smaller)."""
    out = []
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 36**4:
            raise bad_request(f"token id {t!r} is out of vocabulary", "prompt")
        digits = ""
        while True:
            t, r = divmod(t, 36)
            digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
            if not t:
                break
        out.append(digits)
    return " ".join(out)


def parse_completion(ctx: Context, body: dict[str, Any]) -> Job:
    raw = body.get("prompt")
    texts: list[str]
    if raw is None or raw == "" or raw == []:
        raise bad_request(
            "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "prompt"
        )
    if isinstance(raw, str):
        texts = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(p, str) for p in raw):
        texts = list(raw)
    elif isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        texts = [_ids_text(raw)]
    elif isinstance(raw, list) and raw and all(isinstance(p, list) for p in raw):
        texts = [_ids_text(p) for p in raw]
    else:
        raise bad_request("prompt must be a string, a list of strings or token ids", "prompt")
    requested = _int(body, "max_tokens", 16, 1)
    top = _logprobs(body, "logprobs") if body.get("logprobs") is not None else None
    return _build(ctx, body, "completion", [(t, t) for t in texts], (requested, "max_tokens"), top)


def tokenize_response(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """vLLM's `POST /tokenize`: `{"prompt"}` or `{"messages", "tools"?}` -> `{"count", "max_model_len",
    "tokens", "token_strs"}`. Messages go through `render_chat`, the rendering a chat request's prompt is
    counted with, so `count` is that request's `usage.prompt_tokens` (the simulated model adds no special
    tokens, so `add_special_tokens` changes nothing)."""
    check_model(ctx, body)
    if body.get("messages") is not None:
        text, _ = render_chat(body["messages"], body.get("tools"), ctx.served_names[0])
        if body.get("add_generation_prompt") is False:
            text = text.removesuffix("<|assistant|>\n")
    else:
        prompt = body.get("prompt")
        if prompt is None:
            raise validation_error("missing", "body.prompt", "Field required", body)
        if not isinstance(prompt, str):
            raise validation_error("string_type", "body.prompt", "Input should be a valid string", prompt)
        text = prompt
    pieces = tokenize(text)
    return {
        "count": len(pieces),
        "max_model_len": ctx.profile.max_model_len,
        "tokens": [piece_id(p) for p in pieces],
        "token_strs": pieces if body.get("return_token_strs") else None,
    }
