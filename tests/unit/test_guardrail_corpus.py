"""The input guardrails on the labelled corpus (eval/guardrails/corpus.jsonl): precision and recall per
detector on the held-out 30 %, printed (`pytest -s`, or `python -m eval.guardrails.corpus_eval`), and
the false-positive rate on benign prompts held to <= 1 % (issue 31)."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from eval.guardrails.corpus_eval import benign_fp_rate, load, report, rules, score, split
from gateway.guardrails.detectors import CATEGORIES

CORPUS = load()
HELD_OUT = split(CORPUS, "test")
# Floors under the measured held-out figures (docs/design/025-guardrails.md): a rule change that costs
# more than a prompt or two of precision or recall fails here.
FLOORS = {
    "secrets": (0.95, 0.85),
    "pii": (0.85, 0.85),
    "injection": (0.95, 0.85),
    "hidden_unicode": (0.95, 0.95),
    "exfiltration": (0.95, 0.9),
}


def test_corpus_is_large_labelled_and_split_as_documented() -> None:
    assert len(CORPUS) >= 200
    assert len({r.id for r in CORPUS}) == len(CORPUS)
    labels = Counter(label for r in CORPUS for label in r.labels)
    assert all(labels[c] >= 20 for c in CATEGORIES), labels
    kinds = Counter(r.kind for r in CORPUS if not r.labels)
    assert {"code", "math", "chat", "hard", "tool"} <= set(kinds) and sum(kinds.values()) >= 100
    # The fixed split: per group (the id's prefix), the 30 % with the smallest BLAKE2b digests.
    groups: dict[str, list[str]] = {}
    for r in CORPUS:
        groups.setdefault(r.id.rsplit("-", 1)[0], []).append(r.text)
    held = {r.text for r in HELD_OUT}
    for texts in groups.values():
        ranked = sorted(texts, key=lambda t: hashlib.blake2b(t.encode(), digest_size=8).digest())
        k = round(0.3 * len(texts))
        assert set(ranked[:k]) <= held and not set(ranked[k:]) & held
    assert 0.28 <= len(HELD_OUT) / len(CORPUS) <= 0.32


def test_held_out_precision_recall_and_benign_false_positives() -> None:
    flags = rules()
    print("\n" + report(HELD_OUT, {name: (name, f) for name, f in flags.items()}, show_errors=True))
    for name, (p_floor, r_floor) in FLOORS.items():
        s, _, _ = score(name, name, flags[name], HELD_OUT)
        assert s.tp > 0, name
        assert s.precision >= p_floor and s.recall >= r_floor, (name, s.precision, s.recall)
    rate, flagged = benign_fp_rate(flags, HELD_OUT)
    print(f"false-positive rate on held-out benign: {rate:.3%}")
    assert rate <= 0.01, [r.id for r in flagged]
    rate_all, flagged_all = benign_fp_rate(flags, CORPUS)
    assert rate_all <= 0.01, [r.id for r in flagged_all]


@pytest.mark.needs_encoder
def test_knn_injection_detector_does_not_beat_the_rules() -> None:
    """Why the gateway ships the rules and not the MiniLM kNN detector (docs/design/025): on the held-out
    split it is worse on both precision and recall. If a better corpus or encoder ever turns this
    around, this fails: then ship the kNN detector."""
    from eval.guardrails.knn import KnnDetector

    knn = KnnDetector.fit(split(CORPUS, "train"))
    k, _, _ = score("knn", "injection", knn.flag, HELD_OUT)
    r, _, _ = score("rules", "injection", rules()["injection"], HELD_OUT)
    print(
        f"\ninjection held out: rules P={r.precision:.3f} R={r.recall:.3f}; "
        f"kNN P={k.precision:.3f} R={k.recall:.3f}"
    )
    assert k.tp > 0  # the kNN detector does detect: the comparison is not against a dead model
    assert k.precision < r.precision and k.recall < r.recall
