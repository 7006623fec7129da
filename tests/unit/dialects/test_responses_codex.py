"""Codex CLI against the Responses dialect: the first request `codex exec` 0.169.0 sends to a
`wire_api = "responses"` provider (its structure as captured on 2026-12-07, every free text and
identifier filled back in with stand-ins of the captured length) becomes a valid chat request, and a
turn goes round as Codex drives it: the answer streamed with reasoning (sealed) and a call to a
namespaced tool, then the next request carrying both back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.dialects.responses import ResponsesDialect, hosted_tools, reject_hosted
from gateway.dialects.seal import Sealer
from gateway.errors import InvalidRequestError

# The captured body (/work/shared/reference/agent-requests/codex-0.169.0-responses.json), unchanged.
CAPTURED = r"""
{
 "model": "large",
 "stream": true,
 "input": [
  {
   "type": "message",
   "id": "msg_<id>",
   "role": "developer",
   "content": [
    {
     "type": "input_text",
     "text": "<text: 16979 chars>"
    }
   ]
  },
  {
   "type": "message",
   "id": "msg_<id>",
   "role": "developer",
   "content": [
    {
     "type": "input_text",
     "text": "<text: 2125 chars>"
    },
    {
     "type": "input_text",
     "text": "<text: 341 chars>"
    }
   ]
  },
  {
   "type": "message",
   "id": "msg_<id>",
   "role": "user",
   "content": [
    {
     "type": "input_text",
     "text": "<text: 417 chars>"
    }
   ]
  },
  {
   "type": "message",
   "id": "msg_<id>",
   "role": "user",
   "content": [
    {
     "type": "input_text",
     "text": "<text: 9 chars>"
    }
   ]
  }
 ],
 "tools": [
  {
   "type": "function",
   "name": "exec_command",
   "description": "<text: 82 chars>",
   "strict": false,
   "parameters": {
    "type": "object",
    "properties": {
     "cmd": {
      "type": "string",
      "description": "<text: 25 chars>"
     },
     "justification": {
      "type": "string",
      "description": "<text: 70 chars>"
     },
     "login": {
      "type": "boolean",
      "description": "<text: 80 chars>"
     },
     "max_output_tokens": {
      "type": "number",
      "description": "<text: 87 chars>"
     },
     "prefix_rule": {
      "type": "array",
      "description": "<text: 118 chars>",
      "items": {
       "type": "string"
      }
     },
     "sandbox_permissions": {
      "type": "string",
      "description": "<text: 107 chars>",
      "enum": [
       "use_default",
       "require_escalated"
      ]
     },
     "shell": {
      "type": "string",
      "description": "<text: 61 chars>"
     },
     "tty": {
      "type": "boolean",
      "description": "<text: 72 chars>"
     },
     "workdir": {
      "type": "string",
      "description": "<text: 60 chars>"
     },
     "yield_time_ms": {
      "type": "number",
      "description": "<text: 83 chars>"
     }
    },
    "required": [
     "cmd"
    ],
    "additionalProperties": false
   }
  },
  {
   "type": "function",
   "name": "write_stdin",
   "description": "<text: 80 chars>",
   "strict": false,
   "parameters": {
    "type": "object",
    "properties": {
     "chars": {
      "type": "string",
      "description": "<text: 72 chars>"
     },
     "max_output_tokens": {
      "type": "number",
      "description": "<text: 87 chars>"
     },
     "session_id": {
      "type": "number",
      "description": "<text: 47 chars>"
     },
     "yield_time_ms": {
      "type": "number",
      "description": "<text: 128 chars>"
     }
    },
    "required": [
     "session_id"
    ],
    "additionalProperties": false
   }
  },
  {
   "type": "function",
   "name": "request_user_input",
   "description": "<text: 120 chars>",
   "strict": false,
   "parameters": {
    "type": "object",
    "properties": {
     "questions": {
      "type": "array",
      "description": "<text: 56 chars>",
      "items": {
       "type": "object",
       "properties": {
        "header": {
         "type": "string",
         "description": "<text: 55 chars>"
        },
        "id": {
         "type": "string",
         "description": "<text: 51 chars>"
        },
        "options": {
         "type": "array",
         "description": "<text: 224 chars>",
         "items": {
          "type": "object",
          "properties": {
           "description": {
            "type": "string",
            "description": "<text: 58 chars>"
           },
           "label": {
            "type": "string",
            "description": "<text: 30 chars>"
           }
          },
          "required": [
           "label",
           "description"
          ],
          "additionalProperties": false
         }
        },
        "question": {
         "type": "string",
         "description": "<text: 41 chars>"
        }
       },
       "required": [
        "id",
        "header",
        "question",
        "options"
       ],
       "additionalProperties": false
      }
     }
    },
    "required": [
     "questions"
    ],
    "additionalProperties": false
   }
  },
  {
   "type": "function",
   "name": "view_image",
   "description": "<text: 124 chars>",
   "strict": false,
   "parameters": {
    "type": "object",
    "properties": {
     "path": {
      "type": "string",
      "description": "<text: 39 chars>"
     }
    },
    "required": [
     "path"
    ],
    "additionalProperties": false
   }
  },
  {
   "type": "namespace",
   "name": "multi_agent_v1",
   "description": "<text: 43 chars>",
   "tools": [
    {
     "type": "function",
     "name": "close_agent",
     "description": "<text: 298 chars>",
     "strict": false,
     "parameters": {
      "type": "object",
      "properties": {
       "target": {
        "type": "string",
        "description": "<text: 37 chars>"
       }
      },
      "required": [
       "target"
      ],
      "additionalProperties": false
     }
    },
    {
     "type": "function",
     "name": "resume_agent",
     "description": "<text: 89 chars>",
     "strict": false,
     "parameters": {
      "type": "object",
      "properties": {
       "id": {
        "type": "string",
        "description": "<text: 19 chars>"
       }
      },
      "required": [
       "id"
      ],
      "additionalProperties": false
     }
    },
    {
     "type": "function",
     "name": "send_input",
     "description": "<text: 215 chars>",
     "strict": false,
     "parameters": {
      "type": "object",
      "properties": {
       "interrupt": {
        "type": "boolean",
        "description": "<text: 98 chars>"
       },
       "items": {
        "type": "array",
        "description": "<text: 96 chars>",
        "items": {
         "type": "object",
         "properties": {
          "audio_url": {
           "type": "string",
           "description": "<text: 34 chars>"
          },
          "image_url": {
           "type": "string",
           "description": "<text: 29 chars>"
          },
          "name": {
           "type": "string",
           "description": "<text: 43 chars>"
          },
          "path": {
           "type": "string",
           "description": "<text: 173 chars>"
          },
          "text": {
           "type": "string",
           "description": "<text: 31 chars>"
          },
          "type": {
           "type": "string",
           "description": "<text: 81 chars>"
          }
         },
         "additionalProperties": false
        }
       },
       "message": {
        "type": "string",
        "description": "<text: 76 chars>"
       },
       "target": {
        "type": "string",
        "description": "<text: 39 chars>"
       }
      },
      "required": [
       "target"
      ],
      "additionalProperties": false
     }
    },
    {
     "type": "function",
     "name": "spawn_agent",
     "description": "<text: 5033 chars>",
     "strict": false,
     "parameters": {
      "type": "object",
      "properties": {
       "fork_context": {
        "type": "boolean",
        "description": "<text: 111 chars>"
       },
       "items": {
        "type": "array",
        "description": "<text: 96 chars>",
        "items": {
         "type": "object",
         "properties": {
          "audio_url": {
           "type": "string",
           "description": "<text: 34 chars>"
          },
          "image_url": {
           "type": "string",
           "description": "<text: 29 chars>"
          },
          "name": {
           "type": "string",
           "description": "<text: 43 chars>"
          },
          "path": {
           "type": "string",
           "description": "<text: 173 chars>"
          },
          "text": {
           "type": "string",
           "description": "<text: 31 chars>"
          },
          "type": {
           "type": "string",
           "description": "<text: 81 chars>"
          }
         },
         "additionalProperties": false
        }
       },
       "message": {
        "type": "string",
        "description": "<text: 71 chars>"
       },
       "model": {
        "type": "string",
        "description": "<text: 77 chars>"
       },
       "reasoning_effort": {
        "type": "string",
        "description": "<text: 79 chars>"
       }
      },
      "additionalProperties": false
     }
    },
    {
     "type": "function",
     "name": "wait_agent",
     "description": "<text: 252 chars>",
     "strict": false,
     "parameters": {
      "type": "object",
      "properties": {
       "targets": {
        "type": "array",
        "description": "<text: 77 chars>",
        "items": {
         "type": "string"
        }
       },
       "timeout_ms": {
        "type": "number",
        "description": "<text: 120 chars>"
       }
      },
      "required": [
       "targets"
      ],
      "additionalProperties": false
     }
    }
   ]
  },
  {
   "type": "function",
   "name": "get_goal",
   "description": "<text: 122 chars>",
   "strict": false,
   "parameters": {
    "type": "object",
    "properties": {},
    "required": [],
    "additionalProperties": false
   }
  },
  {
   "type": "function",
   "name": "create_goal",
   "description": "<text: 265 chars>",
   "strict": false,
   "parameters": {
    "type": "object",
    "properties": {
     "objective": {
      "type": "string",
      "description": "<text: 151 chars>"
     },
     "token_budget": {
      "type": "integer",
      "description": "<text: 73 chars>"
     }
    },
    "required": [
     "objective"
    ],
    "additionalProperties": false
   }
  },
  {
   "type": "function",
   "name": "update_goal",
   "description": "<text: 1541 chars>",
   "strict": false,
   "parameters": {
    "type": "object",
    "properties": {
     "status": {
      "type": "string",
      "description": "<text: 370 chars>",
      "enum": [
       "complete",
       "blocked",
       "paused"
      ]
     }
    },
    "required": [
     "status"
    ],
    "additionalProperties": false
   }
  },
  {
   "type": "web_search",
   "external_web_access": false
  }
 ],
 "tool_choice": "auto",
 "parallel_tool_calls": true,
 "reasoning": {
  "summary": "auto"
 },
 "store": false,
 "include": [
  "reasoning.encrypted_content"
 ],
 "prompt_cache_key": "<text: 36 chars>",
 "client_metadata": {
  "root_turn_id": "<id>",
  "x-codex-turn-metadata": "<text: 792 chars>",
  "x-codex-installation-id": "<id>",
  "session_id": "<id>",
  "x-codex-window-id": "<id>:0",
  "turn_id": "<id>",
  "thread_id": "<id>"
 }
}
"""
PLACEHOLDER = re.compile(r"<text: (\d+) chars>|<id>")
PROSE = (
    "You are a coding agent running in a terminal. Read the repository before changing it, keep edits "
    "small, run the tests, and report what you did. "
)
CHAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
CHAT_BODY: TypeAdapter[CompletionCreateParamsStreaming] = TypeAdapter(CompletionCreateParamsStreaming)
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
KEY = b"k" * 32


def _filled(value: Any, ids: Iterator[int]) -> Any:
    """The captured structure with its placeholders filled: text of the captured length, fresh ids."""
    if isinstance(value, dict):
        return {key: _filled(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [_filled(item, ids) for item in value]
    if isinstance(value, str):

        def fill(match: re.Match[str]) -> str:
            if match.group(1) is None:
                return f"0199c3a1-7e2b-7c4d-9a1e-{next(ids):012x}"
            length = int(match.group(1))
            return (PROSE * (length // len(PROSE) + 1))[:length]

        return PLACEHOLDER.sub(fill, value)
    return value


def codex_body() -> dict[str, Any]:
    body: dict[str, Any] = _filled(orjson.loads(CAPTURED), iter(range(1, 1000)))
    return body


def _consumed(value: Any) -> Any:
    """A value the SDK's types validated, its lazily checked iterables run through (so checked)."""
    if isinstance(value, dict):
        return {key: _consumed(item) for key, item in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ValidatorIterator":
        return [_consumed(item) for item in value]
    return value


def test_the_captured_body_is_what_codex_sends() -> None:
    body = codex_body()
    kinds = [tool["type"] for tool in body["tools"]]
    assert kinds == ["function"] * 4 + ["namespace"] + ["function"] * 3 + ["web_search"]
    assert [m["role"] for m in body["input"]] == ["developer", "developer", "user", "user"]
    assert len(body["input"][0]["content"][0]["text"]) == 16979 and "<" not in orjson.dumps(body).decode()


def test_codexs_first_request_becomes_a_valid_chat_request() -> None:
    body = codex_body()
    chat = ResponsesDialect().to_chat(body)
    _consumed(CHAT_BODY.validate_python(chat))  # the chat API's own request types
    names = [tool["function"]["name"] for tool in chat["tools"]]
    assert names == [
        "exec_command", "write_stdin", "request_user_input", "view_image",
        "multi_agent_v1__close_agent", "multi_agent_v1__resume_agent", "multi_agent_v1__send_input",
        "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent",
        "get_goal", "create_goal", "update_goal",
    ]  # fmt: skip
    assert all(CHAT_NAME.fullmatch(name) for name in names)  # web_search (hosted) is dropped
    spawn = chat["tools"][7]["function"]
    namespace = body["tools"][4]
    assert spawn["parameters"] == namespace["tools"][3]["parameters"] and spawn["strict"] is False
    assert spawn["description"].startswith(namespace["tools"][3]["description"])
    assert spawn["description"].endswith(f"(One of the multi_agent_v1 tools: {namespace['description']})")
    # developer messages are system messages where they stand; two text parts stay two parts
    assert [m["role"] for m in chat["messages"]] == ["system", "system", "user", "user"]
    assert chat["messages"][1]["content"] == [
        {"type": "text", "text": part["text"]} for part in body["input"][1]["content"]
    ]
    assert chat["messages"][3]["content"] == body["input"][3]["content"][0]["text"]
    assert (chat["tool_choice"], chat["parallel_tool_calls"], chat["stream"]) == ("auto", True, True)
    assert chat["prompt_cache_key"] == body["prompt_cache_key"] and len(chat["prompt_cache_key"]) == 36
    assert chat["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    # `reasoning: {summary: auto}` asks the pool nothing; store, include, client_metadata stay here
    assert not {"reasoning_effort", "chat_template_kwargs", "store", "include", "client_metadata"} & set(chat)
    assert hosted_tools(body) == ["web_search"]
    refusal = reject_hosted(hosted_tools(body), body)
    assert (refusal.status, refusal.param, refusal.code) == (400, "tools[8].type", "unsupported_value")
    assert "'web_search'" in refusal.message and "hosted_tools: reject" in refusal.message


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-turn1",
        "object": "chat.completion.chunk",
        "created": 1796605336,
        "choices": choices,
        **extra,
    }


SPAWN_ARGUMENTS = '{"message":"Write the tests for the parser.","fork_context":false}'
SPAWN = "multi_agent_v1__spawn_agent"


def _call(arguments: str, name: str | None = None) -> dict[str, Any]:
    function = {"arguments": arguments} if name is None else {"name": name, "arguments": arguments}
    call = {"index": 0, "function": function}
    return {"tool_calls": [call if name is None else {**call, "id": "call_7", "type": "function"}]}


USAGE = {
    "prompt_tokens": 9000,
    "completion_tokens": 40,
    "total_tokens": 9040,
    "completion_tokens_details": {"reasoning_tokens": 12},
}
TURN = [
    _chunk({"role": "assistant", "content": "", "reasoning_content": "The user wants "}),
    _chunk({"reasoning_content": "a sub-agent for the tests."}),
    _chunk(_call(SPAWN_ARGUMENTS[:20], SPAWN)),
    _chunk(_call(SPAWN_ARGUMENTS[20:])),
    _chunk({}, "tool_calls"),
    _chunk(None, usage=USAGE),
]


def _events(data: bytes) -> list[dict[str, Any]]:
    events = []
    for frame in data.decode().split("\n\n")[:-1]:
        head, line = frame.split("\n")
        event = orjson.loads(line.removeprefix("data: "))
        assert head == f"event: {event['type']}"
        EVENTS.validate_python(event)
        events.append(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    return events


def test_a_codex_turn_goes_round() -> None:
    dialect = ResponsesDialect(sealer=Sealer(KEY))
    body = codex_body()
    stream = dialect.stream(body)
    events = _events(b"".join(stream.feed(chunk) for chunk in TURN) + stream.close())
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_part.added", "response.content_part.added",
        "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    thought = "The user wants a sub-agent for the tests."
    reasoning = events[13]["item"]
    assert reasoning["summary"] == [{"type": "summary_text", "text": thought}]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": thought}]
    assert Sealer(KEY).unseal(reasoning["encrypted_content"]) == thought
    call = events[18]["item"]
    assert (call["type"], call["name"], call["namespace"]) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
    )
    assert (call["call_id"], call["arguments"]) == ("call_7", SPAWN_ARGUMENTS)
    completed = events[-1]["response"]
    assert completed["output"] == [reasoning, call] and completed["usage"]["output_tokens_details"] == {
        "reasoning_tokens": 12
    }
    # Codex's next request: the history, the items it kept from output_item.done, the tool's output.
    kept = [{k: v for k, v in item.items() if k != "status"} for item in (reasoning, call)]
    output = {"type": "function_call_output", "call_id": "call_7", "output": "agent a1 started"}
    follow = {**body, "input": [*body["input"], *kept, output]}
    chat = dialect.to_chat(follow)
    assert chat["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "multi_agent_v1__spawn_agent", "arguments": SPAWN_ARGUMENTS},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": "agent a1 started"},
    ]
    assert len(chat["messages"]) == 6  # the reasoning item is not sent to the pool
    # another replica sharing the key takes the turn; one with another key, or a changed text, refuses
    assert ResponsesDialect(sealer=Sealer(KEY)).to_chat(follow) == chat
    forged = {**kept[0], "encrypted_content": Sealer(b"x" * 32).seal(thought)}
    for dialect_, item in ((ResponsesDialect(), kept[0]), (dialect, forged)):
        with pytest.raises(InvalidRequestError) as caught:
            dialect_.to_chat({**follow, "input": [*body["input"], item, kept[1], output]})
        assert (caught.value.param, caught.value.code) == (
            "input[4].encrypted_content",
            "invalid_encrypted_content",
        )
