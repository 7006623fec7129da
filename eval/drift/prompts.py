"""The canary prompts: the shipped default set (`pools.drift_answer.CANARY_PROMPTS`, which the
gateway's canary also uses), or the operator's own file.

A prompts file is one of: `.txt` (one prompt a line, blank lines and `#` lines skipped), `.jsonl` (an
object with `prompt` a line), `.json` / `.yaml` (a list of strings).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from pools.drift_answer import CANARY_PROMPTS

DEFAULT_PROMPTS = CANARY_PROMPTS


class PromptsError(ValueError):
    """A prompts file that cannot be used; the message names the file (and the line)."""


def _strings(items: Any, source: str) -> list[str]:
    if not isinstance(items, list) or not all(isinstance(x, str) and x.strip() for x in items):
        raise PromptsError(f"{source}: expected a list of non-empty strings")
    return list(items)


def load_prompts(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptsError(f"{path}: cannot read prompts file: {exc.strerror}") from None
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            prompts = _strings(yaml.safe_load(text), str(path))
        elif suffix == ".json":
            prompts = _strings(json.loads(text), str(path))
        elif suffix == ".jsonl":
            prompts = []
            for n, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                    raise PromptsError(f"{path}:{n}: expected an object with a string `prompt`")
                prompts.append(row["prompt"])
        else:
            prompts = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PromptsError(f"{path}: not valid {suffix.lstrip('.').upper()}: {exc}") from None
    if not prompts:
        raise PromptsError(f"{path}: no prompts")
    return prompts
