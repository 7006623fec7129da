"""The head's one-row serving path (kNN and lexical) gives the numbers of its batch path.

Serving scores one request per head call, through `_predict_one`; training, evaluation and batched
serving go through the 2-D path. A difference would mean serving is not what was trained and measured.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from router.artifact import load_artifact
from router.artifact_error import RouterArtifactError
from router.encoder import Encoder
from router.head import fit_knn
from router.lexical import fit_lexical

MMLU_DEV = Path("/work/shared/data/routing/mmlu_dev.jsonl")


def _prompts(n: int) -> list[str]:
    if not MMLU_DEV.is_file():
        pytest.skip(f"{MMLU_DEV} not present (shared routing data)")
    with MMLU_DEV.open("rb") as fh:
        return [str(orjson.loads(line)["prompt"]) for line in fh][:n]


def test_shipped_head_one_row_equals_batch_on_real_prompts() -> None:
    prompts = _prompts(300)
    artifact = load_artifact()
    try:
        encoder = Encoder.load()
    except RouterArtifactError as exc:
        pytest.skip(f"router encoder not built: {exc}")
    emb = encoder.embed(prompts, artifact.max_tokens)
    head = artifact.head
    for comp in head.components:
        batch = comp.predict(emb, prompts)
        one = np.array([comp.predict(emb[i : i + 1], [p])[0] for i, p in enumerate(prompts)])
        np.testing.assert_allclose(one, batch, rtol=0, atol=1e-6, err_msg=comp.kind)
    batch_d = head.difficulty(emb, prompts)
    one_d = np.array([head.difficulty(emb[i : i + 1], [p])[0] for i, p in enumerate(prompts)])
    np.testing.assert_allclose(one_d, batch_d, rtol=0, atol=1e-6)


def test_knn_one_row_equals_batch_with_duplicate_keys_and_small_sets() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(60, 12)).astype(np.float32)
    emb = np.vstack([base, base[:20]])  # exact duplicates: tied similarities
    target = rng.choice([-1.0, 0.0, 1.0], size=len(emb))
    query = np.vstack([base[:5], rng.normal(size=(20, 12)).astype(np.float32)])
    for ks in ((5, 20), (3, 50, 200)):  # 200 > rows: the whole set
        knn = fit_knn(emb, target, ks=ks, rank=8)
        batch = knn.predict(query)
        one = np.array([knn.predict(query[i : i + 1])[0] for i in range(len(query))])
        np.testing.assert_allclose(one, batch, rtol=0, atol=1e-6)


def test_lexical_one_row_equals_batch_including_empty_and_unseen_text() -> None:
    texts = [f"{'calculate the integral' if i % 2 else 'name the capital'} case {i}" for i in range(80)]
    lex = fit_lexical(texts, np.asarray([i % 2 for i in range(80)], dtype=np.float64), alpha=1.0)
    queries = [*texts[:10], "", "!!! ??", "entirely unseen vocabulary here", "calculate " * 50]
    emb = np.zeros((len(queries), 4), dtype=np.float32)
    batch = lex.predict(emb, queries)
    one = np.array([lex.predict(emb[i : i + 1], [q])[0] for i, q in enumerate(queries)])
    np.testing.assert_allclose(one, batch, rtol=0, atol=1e-9)
