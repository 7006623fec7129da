"""The adapters a simulated replica serves, and vLLM 0.32's LoRA routes (`/v1/load_lora_adapter`, unload).

After `entrypoints/openai/models/serving.py` (`OpenAIServingModels`) and `entrypoints/serve/lora/`:
- `--lora-modules name=path` (or vLLM's JSON form `{"name", "path", "base_model_name"}`) are loaded at
  start; one that does not load stops the server, as in vLLM;
- an adapter is found when `<path>/adapter_config.json` (peft's file, which vLLM reads first) exists;
  its `r` is the rank, over `--max-lora-rank` refused like vLLM's `PEFTHelper.validate_legal` (a 500:
  vLLM's load handler turns every engine error but "not found" into InternalServerError);
- load: 200 `Success: LoRA adapter 'NAME' added successfully.` (a bare body without a content type,
  like the Starlette `Response` vLLM returns); a name already loaded (without `load_inplace`) or the
  base model's name: 400 `InvalidUserInput`; a path without an adapter: 404 `NotFoundError`
  `Loading lora NAME failed: No adapter found for PATH`;
- unload: 200 `Success: LoRA adapter 'NAME' removed successfully.`; an unknown name: 404;
- `/v1/models` lists each adapter after the base names: `root` its path, `parent` its base model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.sim.errors import ApiError, validation_error


@dataclass(frozen=True, slots=True)
class LoraModule:
    """One `--lora-modules` entry (vLLM's `LoRAModulePath`)."""

    name: str
    path: str
    base_model_name: str | None = None


@dataclass(frozen=True, slots=True)
class Adapter:
    name: str
    path: str
    rank: int
    int_id: int
    base_model_name: str | None = None


def parse_lora_modules(items: list[str]) -> list[LoraModule]:
    """vLLM's `LoRAParserAction`: `name=path` when the item has `=` and no comma, else a JSON object."""
    out: list[LoraModule] = []
    for item in items:
        if not item:
            continue
        if "=" in item and "," not in item:
            name, path = item.split("=", 1)
            out.append(LoraModule(name, path))
            continue
        try:
            raw = json.loads(item)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Invalid JSON format for --lora-modules: {item}") from exc
        if not isinstance(raw, dict) or not {"name", "path"} <= raw.keys():
            raise ValueError(f"Invalid fields for --lora-modules: {item} - needs name and path")
        base = raw.get("base_model_name")
        out.append(LoraModule(str(raw["name"]), str(raw["path"]), str(base) if base else None))
    return out


def write_adapter(directory: Path, rank: int = 8) -> Path:
    """A stand-in peft adapter directory (only its `adapter_config.json`, all the simulator reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "bias": "none"}
    (directory / "adapter_config.json").write_text(json.dumps(config))
    return directory


def _not_found(name: str, path: str) -> ApiError:
    return ApiError(404, f"Loading lora {name} failed: No adapter found for {path}", None, "NotFoundError")


def read_rank(name: str, path: str, max_rank: int) -> int:
    """The adapter's rank from `<path>/adapter_config.json`; ApiError as vLLM answers a bad adapter."""
    try:
        text = (Path(path) / "adapter_config.json").read_text()
    except OSError as exc:  # vLLM: FileNotFoundError -> LoRAAdapterNotFoundError
        raise _not_found(name, path) from exc
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ApiError(
            500, f"Invalid adapter_config.json in {path}: {exc}", None, "InternalServerError"
        ) from exc
    config = config if isinstance(config, dict) else {}
    pattern = config.get("rank_pattern")
    ranks = [config.get("r", 8), *(pattern.values() if isinstance(pattern, dict) else ())]
    if not all(isinstance(r, int) for r in ranks):
        raise ApiError(500, f"Invalid LoRA rank in {path}: {ranks}", None, "InternalServerError")
    if max(ranks) > max_rank:
        raise ApiError(
            500,
            f"LoRA rank {max(ranks)} is greater than max_lora_rank {max_rank}.",
            None,
            "InternalServerError",
        )
    return int(ranks[0])


def _invalid(message: str) -> ApiError:
    return ApiError(400, message, None, "InvalidUserInput")


class AdapterRegistry:
    """The registered adapters by name, in load order (what `/v1/models` lists)."""

    def __init__(self, base_names: tuple[str, ...], max_rank: int) -> None:
        self.base_names = base_names
        self.max_rank = max_rank
        self.adapters: dict[str, Adapter] = {}
        self._next_id = 0

    def __contains__(self, name: object) -> bool:
        return name in self.adapters

    def load(self, name: str, path: str, inplace: bool = False, base: str | None = None) -> str:
        if not name or not path:
            raise _invalid("Both 'lora_name' and 'lora_path' must be provided.")
        if name in self.base_names:
            raise _invalid(f"The lora adapter '{name}' conflicts with a served base model.")
        if not inplace and name in self.adapters:
            raise _invalid(
                f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
                "in place, set 'load_inplace' to True."
            )
        rank = read_rank(name, path, self.max_rank)
        previous = self.adapters.get(name)
        if previous is None:
            self._next_id += 1
        int_id = previous.int_id if previous is not None else self._next_id
        self.adapters[name] = Adapter(name, path, rank, int_id, base if base in self.base_names else None)
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, name: str) -> str:
        if not name:
            raise _invalid("'lora_name' needs to be provided to unload a LoRA adapter.")
        if name not in self.adapters:
            raise ApiError(404, f"The lora adapter '{name}' cannot be found.", None, "NotFoundError")
        del self.adapters[name]
        return f"Success: LoRA adapter '{name}' removed successfully."

    def load_modules(self, modules: list[LoraModule]) -> None:
        """The `--lora-modules` at start; ValueError (the server does not start) if one fails."""
        for m in modules:
            try:
                self.load(m.name, m.path, base=m.base_model_name)
            except ApiError as exc:
                raise ValueError(exc.message) from exc

    def cards(self, created: int, perm_prefix: str) -> list[dict[str, Any]]:
        """`/v1/models` entries (vLLM's `ModelCard`: no max_model_len for an adapter)."""
        return [
            {
                "id": a.name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": a.path,
                "parent": a.base_model_name or self.base_names[0],
                "max_model_len": None,
                "permission": [model_permission(f"modelperm-{perm_prefix}lora{a.int_id}", created)],
            }
            for a in self.adapters.values()
        ]


def model_permission(perm_id: str, created: int) -> dict[str, Any]:
    return {
        "id": perm_id,
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }


def _string(body: dict[str, Any], key: str, required: bool = True) -> str:
    if key not in body:
        if not required:
            return ""
        raise validation_error("missing", f"body.{key}", "Field required", body)
    value = body[key]
    if not isinstance(value, str):
        raise validation_error("string_type", f"body.{key}", "Input should be a valid string", value)
    return value


def load_request(registry: AdapterRegistry, body: dict[str, Any]) -> str:
    """`LoadLoRAAdapterRequest` {lora_name, lora_path, load_inplace}: the success text or ApiError."""
    name, path = _string(body, "lora_name"), _string(body, "lora_path")
    inplace = body.get("load_inplace", False)
    if not isinstance(inplace, bool):
        raise validation_error("bool_type", "body.load_inplace", "Input should be a valid boolean", inplace)
    return registry.load(name, path, inplace)


def unload_request(registry: AdapterRegistry, body: dict[str, Any]) -> str:
    """`UnloadLoRAAdapterRequest` {lora_name, lora_int_id (ignored)}: the success text or ApiError."""
    return registry.unload(_string(body, "lora_name"))
