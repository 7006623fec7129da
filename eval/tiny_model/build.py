"""Write the tokenizer, the model and the LoRA adapters of `recipe.py` into a directory.

Imports torch, transformers, tokenizers and peft: run it with the vLLM venv (`.tools/vllm`), where they
are installed; `__main__` decides whether a build is needed without importing any of them.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from eval.tiny_model import recipe


def build_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.VOCAB_SIZE,
        special_tokens=list(recipe.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [p.read_text(encoding="utf-8") for p in recipe.corpus_paths()]
    tok.train_from_iterator(texts, trainer)
    bos = recipe.SPECIAL_TOKENS[1]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=recipe.CHAT_TEMPLATE,
    )


def build_model(vocab_size: int) -> LlamaForCausalLM:
    torch.manual_seed(recipe.SEED)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, **recipe.MODEL_CONFIG))
    with torch.no_grad():
        model.lm_head.weight.mul_(recipe.LM_HEAD_SCALE)
    return model


def save_lora(model: LlamaForCausalLM, base_dir: Path, out: Path, seed_offset: int) -> None:
    peft = importlib.import_module("peft")  # only in the vLLM venv; untyped on purpose
    config = peft.LoraConfig(task_type="CAUSAL_LM", **recipe.LORA)
    adapted = peft.get_peft_model(model, config)
    gen = torch.Generator().manual_seed(recipe.SEED + seed_offset)
    with torch.no_grad():
        for name, param in sorted(adapted.named_parameters()):
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * recipe.LORA_INIT_STD)
    # Relative, not the build directory: the files are moved after the build and must not name it.
    adapted.peft_config["default"].base_model_name_or_path = base_dir.name
    # peft keeps target_modules as a set, which JSON-dumps in hash order (PYTHONHASHSEED): sorted, the
    # adapter_config.json of a build is the same bytes on every run.
    adapted.peft_config["default"].target_modules = sorted(adapted.peft_config["default"].target_modules)
    adapted.save_pretrained(str(out))


def build(out: Path) -> None:
    """Write `out/model` (tokenizer + bf16 weights) and `out/lora-a`, `lora-b`, `lora-c` (rank-8 adapters)."""
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer))
    model_dir = out / "model"
    tokenizer.save_pretrained(str(model_dir))
    model.bfloat16().save_pretrained(str(model_dir))
    model.generation_config.save_pretrained(str(model_dir))
    # Each adapter is made on a fresh fp32 copy of the same weights (peft trains in fp32; vLLM casts it;
    # get_peft_model wraps the model it is given, so one copy per adapter).
    for name, seed_offset in recipe.LORA_ADAPTERS.items():
        save_lora(build_model(len(tokenizer)), model_dir, out / name, seed_offset)
