"""Invisible characters that carry text a human reviewer cannot see but a model reads.

- Unicode tag characters U+E0000-U+E007F: every ASCII character has an invisible twin there ("ASCII
  smuggling"), so a whole instruction can hide in an innocent-looking sentence. The one legitimate use,
  subdivision flags (U+1F3F4 + tag letters + U+E007F cancel tag: the flags of England, Scotland,
  Wales), is left alone.
- Bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069): text that displays in a
  different order than it is read ("Trojan Source").
- Runs of two or more zero-width characters (ZWSP, ZWNJ, ZWJ, word joiner, invisible operators, a BOM
  inside the text, Mongolian vowel separator): binary encodings of hidden text. One alone is ordinary
  (ZWJ inside emoji sequences, ZWNJ in Persian and Indic scripts, a stray ZWSP from a web page).
- Runs of two or more variation selectors from the supplement (U+E0100-U+E01EF), which can also encode
  bytes ("emoji smuggling"); one after an ideograph is a legitimate glyph variant.

ASCII text has none of these, and `str.isascii` is O(1) on CPython, so ordinary prompts pay nothing.
`strip_hidden` removes them (the redact mode); it never decodes them.
"""

from __future__ import annotations

import re

from gateway.guardrails._spans import replace_spans

__all__ = ["find_hidden", "strip_hidden"]

_FLAG = re.compile("\U0001f3f4[\U000e0061-\U000e007a\U000e0030-\U000e0039]{2,8}\U000e007f")
_HIDDEN = re.compile(
    "[\U000e0000-\U000e007f]"
    "|[\u202a-\u202e\u2066-\u2069]"
    "|[\u200b-\u200d\u2060-\u2064\ufeff\u180e]{2,}"
    "|[\U000e0100-\U000e01ef]{2,}"
)


def _found(text: str) -> list[tuple[int, int]]:
    if text.isascii():
        return []
    flags = [m.span() for m in _FLAG.finditer(text)] if "\U0001f3f4" in text else []
    out = []
    for m in _HIDDEN.finditer(text):
        s, e = m.span()
        if not any(fs <= s and e <= fe for fs, fe in flags):
            out.append((s, e))
    return out


def find_hidden(text: str) -> bool:
    """Whether `text` carries invisible characters that can hide instructions."""
    return bool(_found(text))


def strip_hidden(text: str) -> str:
    return replace_spans(text, _found(text))
