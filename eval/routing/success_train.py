"""Training the multi-model success predictor (`llmgw router train-success`): routing files -> the
artifact router/success.py serves.

Data: every (prompt, model) outcome of every file. Files list different models (RouteLLM MMLU 2,
RouterBench 11, MMLU-Pro 31, ZeroEval 40-48); a model absent from a row is simply not a training
pair. Names that differ only in letter case (`Mixtral-8x7B-Instruct-v0.1` in MMLU-Pro,
`mixtral-8x7b-instruct-v0.1` in RouteLLM MMLU) are one model and share parameters; the spelling with
the most outcomes names it. A prompt repeated across files is one row whose outcomes are merged (the
first file's outcome wins for a model it already has).

Contamination: `--exclude` files (the evaluation sets) remove every training prompt that repeats one of
theirs, verbatim after normalisation (lower case, letters and digits only) or through one shared
13-word n-gram: the README's rule for its own contamination check, which also catches MMLU-Pro's
rewritten `:ori_mmlu` questions that share a stem with RouteLLM MMLU. Leaving RouteLLM MMLU out also
drops every `:ori_mmlu` row outright (the README's instruction; n-grams miss a few).

Fit (item-response / matrix factorisation; router/success.py has the serving form):
1. centre the embeddings and project them on their top `pca_rank` principal axes, scaled so the
   average axis has unit variance (a well-conditioned start for the optimiser);
2. jointly learn a (pca_rank x k) map B to a k-dim prompt latent z, and per model an ability a_m and a
   loading vector v_m, minimising the weighted logistic loss of sigmoid(a_m + v_m . z) against each
   outcome plus `l2` (||B||^2 + ||V||^2). Each source's pairs together weigh (its pair count)^balance
   relative to the others (balance 0 = sources weigh alike, 1 = every pair alike): MMLU-Pro alone
   holds three quarters of all pairs and would otherwise set the latent axes on its own.
   Full-batch Adam over the dense (rows x models) outcome matrix with a mask; seeded init.
3. fold the PCA and B into one (d x k) basis, so serving is two small matrix products.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from eval.routing.data import Row, load_rows
from eval.routing.embed_cache import DEFAULT_CACHE_DIR, embed_texts
from eval.routing.train import row_texts
from router.artifact import sha256_file
from router.encoder import ROUTER_LAYERS, Encoder
from router.success import SuccessModel, write_success_model

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

ORI_MMLU_SUFFIX = ":ori_mmlu"
# RouterBench's `mixtral-8x7b-chat` is Mixtral-8x7B-Instruct-v0.1 served by Together (RouterBench,
# arXiv:2403.12031, Table 1); RouteLLM MMLU and MMLU-Pro call it `mixtral-8x7b-instruct-v0.1`.
ALIASES: tuple[tuple[str, str], ...] = (("mixtral-8x7b-chat", "mixtral-8x7b-instruct-v0.1"),)
NGRAM = 13
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class SuccessConfig:
    max_tokens: int = 32
    layers: int = ROUTER_LAYERS
    pca_rank: int = 128
    latent: int = 16
    l2: float = 1e-3
    # Penalty on each model's deviation from the mean loading vector, relative to `l2` (1 = plain L2 on
    # the loadings; larger = models share one prompt-difficulty direction unless their data disagree).
    shrink: float = 10.0
    # Names two files give one model; the second is the name it is trained under (see ALIASES).
    aliases: tuple[tuple[str, str], ...] = ()
    # One logit offset per training source, shared by all its models and dropped at serving: "this
    # benchmark is harder for everyone" (MATH-L5 vs MMLU-Pro) then stays out of the models' abilities.
    source_offsets: bool = False
    balance: float = 0.5
    steps: int = 400
    learning_rate: float = 0.03
    seed: int = 0


def source_of(path: str | Path) -> str:
    """The leave-one-source-out unit a file belongs to (train/dev splits of one benchmark are one)."""
    name = Path(path).name.removesuffix(".jsonl")
    for prefix, source in (("mmlupro_", "mmlupro"), ("mmlu_", "mmlu"), ("zeroeval_", "")):
        if name.startswith(prefix):
            return source or name.removeprefix(prefix).replace("_", "-")
    if name.startswith("routerbench_"):
        return "routerbench-" + name.removeprefix("routerbench_").removesuffix("_train")
    return name


def _normalized(text: str) -> str:
    return "".join(_WORD.findall(text.lower()))


def _ngrams(text: str) -> set[bytes]:
    words = _WORD.findall(text.lower())
    return {
        hashlib.blake2b(" ".join(words[i : i + NGRAM]).encode(), digest_size=8).digest()
        for i in range(len(words) - NGRAM + 1)
    }


def overlap_mask(prompts: Sequence[str], held: Sequence[str]) -> npt.NDArray[np.bool_]:
    """True where a prompt repeats a held-out one: same normalised text or a shared 13-word n-gram."""
    held_text = {_normalized(t) for t in held}
    held_grams: set[bytes] = set()
    for t in held:
        held_grams |= _ngrams(t)
    return np.array(
        [_normalized(p) in held_text or not _ngrams(p).isdisjoint(held_grams) for p in prompts],
        dtype=np.bool_,
    )


@dataclass(frozen=True, slots=True)
class OutcomeTable:
    """Unique prompts x models. `score` is NaN where a model has no outcome for a prompt."""

    texts: tuple[str, ...]
    prompts: tuple[str, ...]
    sources: tuple[str, ...]
    models: tuple[str, ...]
    score: F64  # (n, M)
    emb: F32  # (n, d)


def canonical_names(rows: Sequence[Row], aliases: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """Each model spelling -> the one name of its group (the most frequent spelling). A group is the
    names equal up to letter case, joined with their declared `aliases` (alias, name) pairs."""
    counts = Counter(m for r in rows for m in r.outcomes)
    alias = {a.casefold(): b.casefold() for a, b in aliases}
    groups: dict[str, list[str]] = {}
    for name in counts:
        groups.setdefault(alias.get(name.casefold(), name.casefold()), []).append(name)
    out: dict[str, str] = {}
    for names in groups.values():
        best = min(names, key=lambda n: (-counts[n], n))
        out.update(dict.fromkeys(names, best))
    return out


def build_table(
    labelled: Sequence[tuple[str, Sequence[Row]]],
    emb_of: Mapping[str, F32] | None = None,
    aliases: Sequence[tuple[str, str]] = (),
) -> tuple[OutcomeTable, list[Row]]:
    """(source, rows) groups -> one table of unique prompts; embeddings filled in by the caller
    (`embed_table`) unless `emb_of` maps every text already. Returns the first row of each prompt too."""
    names = canonical_names([r for _, rows in labelled for r in rows], aliases)
    models = tuple(sorted(set(names.values())))
    col = {m: j for j, m in enumerate(models)}
    index: dict[str, int] = {}
    firsts: list[Row] = []
    sources: list[str] = []
    cells: list[dict[int, float]] = []
    for source, rows in labelled:
        for row in rows:
            i = index.get(row.prompt)
            if i is None:
                i = index[row.prompt] = len(firsts)
                firsts.append(row)
                sources.append(source)
                cells.append({})
            for model, outcome in row.outcomes.items():
                cells[i].setdefault(col[names[model]], outcome.score)
    score = np.full((len(firsts), len(models)), np.nan)
    for i, c in enumerate(cells):
        score[i, list(c)] = list(c.values())
    texts = tuple(row_texts(firsts))
    emb = (
        np.stack([emb_of[t] for t in texts]).astype(np.float32)
        if emb_of is not None and texts
        else np.zeros((len(texts), 0), dtype=np.float32)
    )
    table = OutcomeTable(
        texts=texts,
        prompts=tuple(r.prompt for r in firsts),
        sources=tuple(sources),
        models=models,
        score=score,
        emb=emb,
    )
    return table, firsts


def embed_table(
    table: OutcomeTable, encoder: Encoder, max_tokens: int, cache_dir: Path | None = DEFAULT_CACHE_DIR
) -> OutcomeTable:
    emb = embed_texts(encoder, table.texts, max_tokens, cache_dir=cache_dir)
    return OutcomeTable(table.texts, table.prompts, table.sources, table.models, table.score, emb)


def pair_weights(table: OutcomeTable, balance: float) -> F64:
    """(n, M) loss weight of each observed pair (0 where unobserved), mean 1 over observed pairs."""
    observed = ~np.isnan(table.score)
    sources = np.asarray(table.sources)
    w = np.zeros_like(table.score)
    for s in sorted(set(table.sources)):
        rows = sources == s
        count = int(observed[rows].sum())
        if count:
            w[rows] = observed[rows] * (count ** (balance - 1.0))
    total = float(w.sum())
    out: F64 = w * (observed.sum() / total) if total > 0 else w
    return out


@dataclass(frozen=True, slots=True)
class FitReport:
    loss: float
    steps: int
    pairs: int


def fit_success(
    emb: F32,
    score: F64,
    weights: F64,
    models: Sequence[str],
    cfg: SuccessConfig,
    groups: npt.NDArray[np.int64] | None = None,
) -> tuple[SuccessModel, FitReport]:
    """The predictor minimising the weighted logistic loss over observed (weight > 0) pairs.

    `score` may be fractional (RouterBench MBPP): the loss is the cross-entropy against it. `groups`
    (each row's source index) enables per-source offsets when `cfg.source_offsets` is set.
    """
    rng = np.random.default_rng(cfg.seed)
    n, d = emb.shape
    m = score.shape[1]
    mean = emb.mean(axis=0).astype(np.float64)
    x0 = emb.astype(np.float64) - mean
    rank = max(1, min(cfg.pca_rank, n, d))
    _, sv, vt = np.linalg.svd(x0, full_matrices=False)
    pca = vt[:rank].T  # (d, r)
    # One global scale (not per-axis whitening): weak axes keep their small variance, so the L2
    # penalty still favours the strong ones.
    scale = float(np.sqrt((sv[:rank] ** 2).mean() / max(n, 1)))
    x = (x0 @ pca) / max(scale, 1e-12)
    k = max(1, min(cfg.latent, rank))
    y = np.nan_to_num(score, nan=0.0)
    w = weights / float(weights.sum())
    observed_mean = np.clip((w * y).sum(axis=0) / np.maximum(w.sum(axis=0), 1e-12), 1e-3, 1 - 1e-3)
    # loadings_m = common + dev_m: the common direction is what every model shares (prompt difficulty),
    # dev_m a model's own profile, penalised `shrink` times harder.
    params = {
        "b": np.eye(rank, k) + 0.01 * rng.standard_normal((rank, k)),
        "c": 0.01 * rng.standard_normal(k),
        "v": 0.01 * rng.standard_normal((m, k)),
        "a": np.log(observed_mean / (1 - observed_mean)),
    }
    group = groups if groups is not None and cfg.source_offsets else np.zeros(n, dtype=np.int64)
    if cfg.source_offsets:
        params["o"] = np.zeros(int(group.max()) + 1)
    moments = {key: (np.zeros_like(p), np.zeros_like(p)) for key, p in params.items()}
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    loss = float("nan")
    for step in range(1, cfg.steps + 1):
        z = x @ params["b"]
        loadings = params["v"] + params["c"]
        logits = z @ loadings.T + params["a"]
        if cfg.source_offsets:
            logits += params["o"][group][:, None]
        p = 1.0 / (1.0 + np.exp(-np.clip(logits, -30, 30)))
        # softplus(l) - y*l: the cross-entropy of sigmoid(l) against y, stable for large |l|.
        ce = np.logaddexp(0.0, logits) - y * logits
        penalty = (params["b"] ** 2).sum() + (params["c"] ** 2).sum() + cfg.shrink * (params["v"] ** 2).sum()
        loss = float((w * ce).sum()) + cfg.l2 * float(penalty)
        g = w * (p - y)
        gv = g.T @ z
        grads = {
            "a": g.sum(axis=0),
            "v": gv + 2 * cfg.l2 * cfg.shrink * params["v"],
            "c": gv.sum(axis=0) + 2 * cfg.l2 * params["c"],
            "b": x.T @ (g @ loadings) + 2 * cfg.l2 * params["b"],
        }
        if cfg.source_offsets:
            # Penalised like B: it pins the offsets' shared level, which abilities could trade with.
            by_group = np.bincount(group, weights=g.sum(axis=1), minlength=len(params["o"]))
            grads["o"] = by_group + 2 * cfg.l2 * params["o"]
            loss += cfg.l2 * float((params["o"] ** 2).sum())
        for key, grad in grads.items():
            m1, m2 = moments[key]
            m1 *= beta1
            m1 += (1 - beta1) * grad
            m2 *= beta2
            m2 += (1 - beta2) * grad * grad
            step_size = cfg.learning_rate * np.sqrt(1 - beta2**step) / (1 - beta1**step)
            params[key] -= step_size * m1 / (np.sqrt(m2) + eps)
    basis = (pca / max(scale, 1e-12)) @ params["b"]
    model = SuccessModel.from_arrays(
        models,
        mean=mean,
        basis=basis,
        loadings=params["v"] + params["c"],
        ability=params["a"],
        max_tokens=cfg.max_tokens,
    )
    return model, FitReport(loss=loss, steps=cfg.steps, pairs=int((weights > 0).sum()))


def fit_table(table: OutcomeTable, cfg: SuccessConfig) -> tuple[SuccessModel, FitReport]:
    names = sorted(set(table.sources))
    groups = np.array([names.index(s) for s in table.sources], dtype=np.int64)
    weights = pair_weights(table, cfg.balance)
    return fit_success(table.emb, table.score, weights, table.models, cfg, groups)


def training_rows(
    files: Sequence[str | Path], exclude: Sequence[str | Path] = ()
) -> tuple[list[tuple[str, Sequence[Row]]], dict[str, int]]:
    """(source, rows) per training file, with the `exclude` files' prompts (and overlaps) removed."""
    held_rows = load_rows(list(exclude)) if exclude else ()
    held = [r.prompt for r in held_rows]
    drop_ori = any(source_of(p) == "mmlu" for p in exclude)
    out: list[tuple[str, Sequence[Row]]] = []
    dropped = {"overlap": 0, "ori_mmlu": 0}
    for path in files:
        rows = load_rows(path)
        if drop_ori:
            kept = [r for r in rows if not r.source.endswith(ORI_MMLU_SUFFIX)]
            dropped["ori_mmlu"] += len(rows) - len(kept)
            rows = tuple(kept)
        if held:
            mask = overlap_mask([r.prompt for r in rows], held)
            dropped["overlap"] += int(mask.sum())
            rows = tuple(r for r, bad in zip(rows, mask, strict=True) if not bad)
        out.append((source_of(path), rows))
    return out, dropped


def _file_entry(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    return {"name": p.name, "source": source_of(p), "sha256": sha256_file(p)}


def train_success(
    files: Sequence[str | Path],
    out: str | Path,
    cfg: SuccessConfig,
    exclude: Sequence[str | Path] = (),
    encoder: Encoder | None = None,
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
) -> tuple[Path, dict[str, Any]]:
    enc = encoder or Encoder.load(layers=cfg.layers)
    labelled, dropped = training_rows(files, exclude)
    table, _ = build_table(labelled, aliases=cfg.aliases)
    table = embed_table(table, enc, cfg.max_tokens, cache_dir)
    model, fit = fit_table(table, cfg)
    trained = {m.casefold(): m for m in table.models}
    aliases = {a: trained[b.casefold()] for a, b in cfg.aliases if b.casefold() in trained}
    model = replace(model, aliases=aliases)
    observed = ~np.isnan(table.score)
    training = {
        "files": [_file_entry(p) for p in files],
        "exclude": [_file_entry(p) for p in exclude],
        "sources": dict(sorted(Counter(table.sources).items())),
        "rows": len(table.texts),
        "pairs": int(observed.sum()),
        "models": len(table.models),
        "outcomes_per_model": {m: int(c) for m, c in zip(table.models, observed.sum(axis=0), strict=True)},
        "dropped": dropped,
        "recipe": {
            "form": "P(m right | x) = sigmoid(ability_m + loadings_m . ((emb(x) - mean) @ basis))",
            "objective": "weighted logistic loss over observed (prompt, model) pairs"
            " + l2 (||B||^2 + ||common||^2 + shrink ||dev||^2)",
            "names": "case-insensitive model names share parameters",
            **asdict(cfg),
        },
        "seed": cfg.seed,
        "fit": {"loss": round(fit.loss, 6), "steps": fit.steps, "pairs": fit.pairs},
    }
    path = write_success_model(out, model, enc.identity, {"training": training})
    return path, training
