"""Every input of the tiny model build, and the digest that keys its cache (no heavy imports here).

The corpus is a fixed list of standard-library modules of the interpreter running the build; their bytes
enter the digest, so two machines with the same Python produce the same files, and a machine with a
different standard library rebuilds instead of reusing a stale tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from pathlib import Path
from typing import Any

SEED = 20261201
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
# One role tag per message, EOS after each, and the assistant tag as the generation prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
MODEL_CONFIG: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,  # head size 32
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 3,
}
# Random init gives near-flat logits; scaling the output head makes logprobs (and greedy text) distinct.
LM_HEAD_SCALE = 20.0
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
LORA_INIT_STD = 0.05  # peft's default init leaves B = 0 (a no-op adapter); this one changes the output
# The adapters, each its own random init (seed SEED + offset) of the same LORA recipe; lora-a's offset
# is the one the single adapter had, so its files are unchanged.
LORA_ADAPTERS: dict[str, int] = {"lora-a": 1, "lora-b": 2, "lora-c": 3}
CORPUS_MODULES = (
    "argparse.py",
    "difflib.py",
    "textwrap.py",
    "string.py",
    "json/decoder.py",
    "json/encoder.py",
    "email/message.py",
    "http/client.py",
    "http/server.py",
    "urllib/parse.py",
    "collections/__init__.py",
    "dataclasses.py",
    "functools.py",
    "pathlib.py",
    "subprocess.py",
    "typing.py",
    "logging/__init__.py",
    "unittest/case.py",
    "asyncio/base_events.py",
    "calendar.py",
)


def corpus_paths() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [stdlib / name for name in CORPUS_MODULES]


def digest(lib_versions: dict[str, str]) -> str:
    """sha256 over the recipe, build.py, the corpus bytes and the versions of the libraries that write
    the files: any change to what shapes the output rebuilds."""
    h = hashlib.sha256()
    recipe = {
        "seed": SEED,
        "vocab": VOCAB_SIZE,
        "special": SPECIAL_TOKENS,
        "template": CHAT_TEMPLATE,
        "model": MODEL_CONFIG,
        "lm_head_scale": LM_HEAD_SCALE,
        "lora": LORA,
        "lora_std": LORA_INIT_STD,
        "lora_adapters": LORA_ADAPTERS,
        "libs": lib_versions,
    }
    h.update(json.dumps(recipe, sort_keys=True).encode())
    h.update((Path(__file__).parent / "build.py").read_bytes())  # how the recipe is carried out
    for path in corpus_paths():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()
