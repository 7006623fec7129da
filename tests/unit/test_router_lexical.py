"""The lexical head component: hashed TF-IDF ridge, its storage round trip, and edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from router.lexical import LEXICAL_CHARS, LexicalComponent, fit_lexical, hashed_terms

NO_EMB = np.zeros((1, 4), dtype=np.float32)


def _data() -> tuple[list[str], np.ndarray]:
    texts, target = [], []
    for i in range(200):
        hard = i % 2 == 0
        texts.append(f"{'calculate the integral' if hard else 'name the capital'} case {i} of the exam")
        target.append(1.0 if hard else 0.0)
    return texts, np.asarray(target)


def test_learns_words_that_predict_the_gain() -> None:
    texts, target = _data()
    lex = fit_lexical(texts, target, alpha=1.0)
    hard, easy = lex.predict(
        np.zeros((2, 4), np.float32), ["please calculate the integral", "name the capital"]
    )
    assert hard > 0.7 > 0.3 > easy


def test_storage_round_trip_predicts_the_same() -> None:
    texts, target = _data()
    lex = fit_lexical(texts, target, alpha=1.0)
    back = LexicalComponent.from_arrays(lex.arrays("c0"), "c0", lex.params())
    probe = ["calculate the capital", "unseen words only zzz", ""]
    emb = np.zeros((3, 4), np.float32)
    np.testing.assert_allclose(back.predict(emb, probe), lex.predict(emb, probe), atol=1e-6)


def test_empty_and_unseen_text_give_the_mean() -> None:
    texts, target = _data()
    lex = fit_lexical(texts, target, alpha=1.0)
    assert lex.predict(NO_EMB, [""])[0] == pytest.approx(target.mean())
    assert lex.predict(NO_EMB, ["qqqq wwww"])[0] == pytest.approx(target.mean())


def test_only_the_tail_of_a_huge_text_is_read() -> None:
    tail = "calculate the integral of this function " * (LEXICAL_CHARS // 20)
    assert hashed_terms("alpha beta " * 50_000 + tail) == hashed_terms("gamma delta " * 50_000 + tail)
    assert hashed_terms("alpha beta " + tail[-100:]) != hashed_terms("gamma delta " + tail[-100:])


def test_other_feature_settings_are_refused() -> None:
    texts, target = _data()
    lex = fit_lexical(texts, target, alpha=1.0)
    params = {**lex.params(), "buckets": 1024}
    with pytest.raises(ValueError, match="lexical features differ"):
        LexicalComponent.from_arrays(lex.arrays("c0"), "c0", params)
