"""The simulator as the model behind a coding agent: tool calls on cue, and "thinking".

An agent loop needs a model that calls a tool, reads the result and answers. The simulator does it
deterministically, driven by a marker in the prompt:

- the LAST user message contains `[[sim:call NAME]]` or `[[sim:call NAME {json args}]]`, the request offers
  a tool called NAME (or one whose name ends with NAME: flattened namespaced names like `ns__shell` match
  `shell`), and no `tool` message follows that user message: the answer is a call to that tool, with
  arguments built from its JSON schema (its required properties, `fill_schema`) and the marker's args
  laid over them. Once a `tool` message follows, the answer is the text `Done: <the result's first 40
  characters>`, so the loop ends after one round trip.
- `--tool-call-rate R`: without a marker, a request offering tools calls a random one with probability R
  (drawn from the choice's RNG, so a seeded or greedy request decides the same way every time).

Properties named `command`/`cmd` default to a harmless command (`echo sim`; `["bash", "-lc", "echo sim"]`
for an array), so a real agent can run what a random call asks for.

Reasoning, as vLLM 0.32 with `--reasoning-parser` gives it: when the request turns thinking on
(`chat_template_kwargs.enable_thinking: true`, or `reasoning_effort` other than "none"), the answer starts
with a few deterministic tokens of reasoning, sent as `message.reasoning` / `delta.reasoning` (vLLM 0.32's
field name; `reasoning_content` is only accepted on input) and counted in completion tokens and
`usage.completion_tokens_details.reasoning_tokens`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from eval.sim.textgen import fill_schema, words
from eval.sim.tokenizer import tokenize

MARKER = "[[sim:call "
_DONE_CHARS = 40

# vLLM 0.32's --reasoning-parser names (vllm/reasoning/__init__.py): any other name fails the start.
REASONING_PARSERS = frozenset(
    "deepseek_r1 deepseek_v3 deepseek_v4 deepseek_v41 poolside_v1 cohere_command3 cohere_command4 ernie45 "
    "gemma4 glm45 glm47 ling3 openai_gptoss granite granite_thinking_parser hf holo2 hunyuan_a13b hy_v3 "
    "hy_v4 kimi_k2 kimi_k3 k2_horizon mimo minicpmv minimax_m2 minimax_m2_append_think minimax_m3 mistral "
    "nemotron_v3 olmo3 plamo3 muse_glimmer qwen3 seed_oss step3 step3p5 inkling".split()
)

_SHELL_COMMAND = "echo sim"
_COMMAND_KEYS = ("command", "cmd")


@dataclass(frozen=True, slots=True)
class Marker:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """A tool call to answer with: the offered tool's full name, its parameters schema and the arguments."""

    name: str
    arguments: dict[str, Any]


def parse_marker(text: str) -> Marker | None:
    """The first `[[sim:call NAME]]` / `[[sim:call NAME {json}]]` in `text`; None when there is none or it
    is malformed (a marker with bad JSON is ignored rather than failing the request)."""
    start = text.find(MARKER)
    if start < 0:
        return None
    pos = start + len(MARKER)
    end = pos
    while end < len(text) and not text[end].isspace() and not text.startswith("]]", end):
        end += 1
    name = text[pos:end]
    if not name:
        return None
    rest = text[end:].lstrip()
    args: dict[str, Any] = {}
    if rest.startswith("{"):
        # The JSON object ends where it ends: find the `}` after which `]]` follows and that parses.
        for close in _candidates(rest):
            try:
                value = orjson.loads(rest[: close + 1])
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                args, rest = value, rest[close + 1 :].lstrip()
                break
        else:
            return None
    if not rest.startswith("]]"):
        return None
    return Marker(name, args)


def _candidates(text: str) -> list[int]:
    """Positions of `}` followed (after spaces) by `]]`, shortest first."""
    out = []
    for i, ch in enumerate(text):
        if ch == "}" and text[i + 1 :].lstrip().startswith("]]"):
            out.append(i)
    return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _functions(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        return []
    return [
        t["function"]
        for t in tools
        if isinstance(t, dict)
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
    ]


def _find_tool(funcs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for f in funcs:
        if f["name"] == name:
            return f
    for f in funcs:
        if f["name"].endswith(name):
            return f
    return None


def _turn(messages: list[Any]) -> tuple[str, str | None]:
    """The last user message's text, and the text of the last `tool` message after it (None: no result
    came back yet)."""
    last_user = -1
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            last_user = i
    if last_user < 0:
        return "", None
    result: str | None = None
    for m in messages[last_user + 1 :]:
        if isinstance(m, dict) and m.get("role") == "tool":
            result = _content_text(m.get("content"))
    return _content_text(messages[last_user].get("content")), result


def arguments(parameters: Any, rng: random.Random, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """Arguments valid under `parameters`: its required properties (schema-filled; a command property
    gets a harmless shell command), then `given` laid over them."""
    schema = parameters if isinstance(parameters, dict) else {}
    props = schema.get("properties")
    if not isinstance(props, dict):
        props = {}
    required = [k for k in schema.get("required") or [] if isinstance(k, str)]
    out: dict[str, Any] = {}
    for key in required:
        sub = props.get(key, {})
        if key in _COMMAND_KEYS:
            out[key] = _command_value(sub)
        else:
            out[key] = fill_schema(sub, rng, 1)
    out.update(given or {})
    return out


def _command_value(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "array":
        return ["bash", "-lc", _SHELL_COMMAND]
    return _SHELL_COMMAND


def plan(body: dict[str, Any], rng: random.Random, tool_call_rate: float) -> PlannedCall | str | None:
    """What the agent loop answers: a tool call to make, the closing text after a tool result, or None
    (an ordinary answer). Forced `tool_choice` is handled by the caller before this."""
    funcs = _functions(body.get("tools"))
    messages = body.get("messages")
    if not funcs or not isinstance(messages, list) or body.get("tool_choice") == "none":
        return None
    user_text, result = _turn(messages)
    marker = parse_marker(user_text)
    if marker is not None:
        if result is not None:
            return "Done: " + result[:_DONE_CHARS]
        func = _find_tool(funcs, marker.name)
        if func is not None:
            return PlannedCall(func["name"], arguments(func.get("parameters"), rng, marker.args))
        return None
    if result is None and tool_call_rate > 0 and rng.random() < tool_call_rate:
        func = rng.choice(funcs)
        return PlannedCall(func["name"], arguments(func.get("parameters"), rng))
    return None


def wants_reasoning(body: dict[str, Any]) -> bool:
    """Thinking turned on by the request: `chat_template_kwargs.enable_thinking: true` or a
    `reasoning_effort` (other than "none")."""
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is True:
        return True
    effort = body.get("reasoning_effort")
    return isinstance(effort, str) and effort != "none"


def reasoning_pieces(rng: random.Random) -> list[str]:
    """A few tokens of "thinking": a fixed opening and 6 to 12 words from the choice's RNG."""
    thoughts = words(rng, rng.randint(6, 12))
    thoughts[0] = " " + thoughts[0]
    return tokenize("Let me think.") + thoughts
