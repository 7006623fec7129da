from __future__ import annotations

from eval.sim.tokenizer import block_hashes, count_tokens, tokenize


def test_lossless_round_trip() -> None:
    for text in ["", "  lead", "Hello, world!\n\nNew  para  ", "naïve café — ok", "a\tb\r\nc  "]:
        assert "".join(tokenize(text)) == text


def test_long_words_split_every_four_chars() -> None:
    assert tokenize("internationalization") == ["inte", "rnat", "iona", "liza", "tion"]
    assert tokenize("the cat.") == ["the", " cat", "."]


def test_count_grows_with_text() -> None:
    base = "The quick brown fox jumps over the lazy dog."
    assert count_tokens(base * 2) > count_tokens(base) > 0
    assert count_tokens(base) == len(tokenize(base))


def test_block_hashes_are_a_prefix_chain() -> None:
    a = tokenize("shared " * 40 + "tail one")
    b = tokenize("shared " * 40 + "other end")
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert len(ha) == len(a) // 16
    assert ha[:2] == hb[:2]
    c = tokenize("different " + "shared " * 40)
    assert block_hashes(c, 16)[0] != ha[0]
    # A later block hash depends on the whole prefix, not just its own pieces.
    assert block_hashes(["x"] * 16 + ["y"] * 16, 16)[1] != block_hashes(["z"] * 16 + ["y"] * 16, 16)[1]
