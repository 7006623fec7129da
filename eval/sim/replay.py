"""Replay mode: answer known prompts with a model's recorded response from a routing dataset.

The dataset (shared/data/routing/README.md) has one JSON object per line with `prompt` and
`outcomes[MODEL].response`. It is read once at startup into a dict keyed by a 16-byte BLAKE2b digest of
the whitespace-stripped prompt (small keys even for long few-shot prompts). Rows whose response for the
chosen model is null are skipped, so they fall back to generated text like unknown prompts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson


class ReplayError(ValueError):
    pass


def prompt_key(prompt: str) -> bytes:
    return hashlib.blake2b(prompt.strip().encode(), digest_size=16).digest()


class ReplayIndex:
    __slots__ = ("model", "_answers", "rows")

    def __init__(self, model: str, answers: dict[bytes, str], rows: int) -> None:
        self.model = model
        self._answers = answers
        self.rows = rows

    def lookup(self, prompt: str) -> str | None:
        return self._answers.get(prompt_key(prompt))

    def __len__(self) -> int:
        return len(self._answers)

    @classmethod
    def load(cls, path: str | Path, model: str) -> ReplayIndex:
        answers: dict[bytes, str] = {}
        rows = 0
        seen_model = False
        with open(path, "rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = orjson.loads(line)
                    prompt = row["prompt"]
                    outcome = row["outcomes"].get(model)
                except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                    raise ReplayError(f"{path}:{lineno}: not a routing dataset row ({exc})") from exc
                rows += 1
                if outcome is None:
                    continue
                seen_model = True
                response = outcome.get("response") if isinstance(outcome, dict) else None
                if isinstance(prompt, str) and isinstance(response, str):
                    answers.setdefault(prompt_key(prompt), response)
        if not seen_model:
            raise ReplayError(f"{path}: no row has outcomes for model {model!r}")
        return cls(model, answers, rows)
