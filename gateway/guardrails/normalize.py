"""What the model reads, for the detectors: a request's texts folded and joined (issue 39).

The detectors match words and shapes; the model reads through disguises a regex does not. The red
team's misses: Cyrillic look-alikes, fullwidth letters, zero-width spaces between or inside words, soft
hyphens, combining accents, `_` separators, base64, text in a message's `name`, and secrets split
across two content parts or two messages. So, besides each text as it is, the detectors read views:

- **Folded** (one `str.translate`, C speed): compatibility forms to ASCII (fullwidth, mathematical
  alphanumerics, ligatures; NFKD without marks, so accented letters lose their accents), look-alikes
  to the ASCII letter they imitate (the Unicode confusables data, from the maintained
  `confusable-homoglyphs` package), combining marks, zero-width characters, soft hyphens and
  variation selectors dropped (or, in a second variant, zero-widths read as spaces: one between two
  words separates them), Unicode tag characters read as the ASCII they hide, `_` read as a space.
- **Joined**: all the scanned texts of the request, in order, with nothing between them (a secret split
  across parts) for the secret and personal-data detectors, and with a space for the others.
- **Decoded**: base64 and hex runs that decode to text are appended, decoded (at most `MAX_DECODED`
  runs and bytes per request: bounded cost).

`views(texts)` returns them; `origins` maps a view back to where each character came from, so that a
redaction found in a view rewrites the original text at the original spans. Building views costs a
translate per text and a regex pass for the encoded runs; requests whose texts are one ASCII text with
no `_` and no encoded run skip it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import unicodedata
from collections.abc import Iterator, Sequence
from functools import cache
from importlib.resources import files
from itertools import chain

import re2

__all__ = ["MAX_DECODED", "View", "as_is", "origins", "views"]

MAX_DECODED = 32  # encoded runs decoded per request
MAX_DECODED_BYTES = 64 * 1024
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e"
_DROPPED = _ZERO_WIDTH + "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0"  # + soft hyphen, fillers
_MARKS = chain(range(0x300, 0x370), range(0x1AB0, 0x1B00), range(0x1DC0, 0x1E00), range(0x20D0, 0x2100),
               range(0xFE20, 0xFE30), range(0xFE00, 0xFE10), range(0xE0100, 0xE01F0))  # fmt: skip
_COMPAT = chain(range(0x80, 0x2000), range(0x2070, 0x20A0), range(0x2100, 0x2190), range(0x2460, 0x2500),
                range(0xFB00, 0xFB07), range(0xFF00, 0xFFF0), range(0x1D400, 0x1D800))  # fmt: skip
# RE2 (linear, one pass): Python's engine tries this at every position of a prompt, ~150 us per 2 KB of
# prose against ~7 us.
_ENCODED = re2.compile(r"[A-Za-z0-9+/\-_]{16,}={0,2}|(?:[0-9A-Fa-f]{2}[ :]?){8,}")
_PRINTABLE = re.compile(r"[\x20-\x7e\t\n\r]")


@cache
def _tables() -> tuple[dict[int, str | None], dict[int, str | None]]:
    """(zero-widths dropped, zero-widths as spaces): built once, on the first screened request."""
    t: dict[int, str | None] = {}
    for cp in _COMPAT:
        ch = chr(cp)
        base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
        if base and base.isascii() and base != ch:
            t[cp] = base
    data = json.loads(files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8"))
    imitated: dict[str, list[str]] = {}  # glyph -> the ASCII letters and digits it imitates
    for key in (k for k in data if len(k) == 1 and k.isascii() and k.isalnum()):
        for entry in data[key]:
            glyph = entry.get("c", "")
            if len(glyph) == 1 and not glyph.isascii():
                imitated.setdefault(glyph, []).append(key)
    for glyph, keys in imitated.items():
        if ord(glyph) in t:
            continue  # a compatibility form: its NFKD says what it is
        # The letter its name says when that is one it imitates, in its case (the data lists Cyrillic
        # І, "... LETTER BYELORUSSIAN-UKRAINIAN I", under l: I and l look alike), else a letter of the
        # glyph's case, then any letter, then a digit.
        last = unicodedata.name(glyph, "").rsplit(" ", 1)[-1]
        looks = {k.lower() for k in keys} | ({"i"} if "l" in keys else set())  # I and l: one shape
        if len(last) == 1 and last.isascii() and last.isalpha() and last.lower() in looks:
            t[ord(glyph)] = last.upper() if glyph.isupper() else last.lower()
            continue
        same = [k for k in keys if k.isalpha() and k.isupper() == glyph.isupper()]
        t[ord(glyph)] = (same or [k for k in keys if k.isalpha()] or keys)[0]
    for cp in _MARKS:
        t[cp] = None
    for ch in _DROPPED:
        t[ord(ch)] = None
    for cp in range(0xE0020, 0xE007F):  # tag characters: the ASCII they smuggle
        t[cp] = chr(cp - 0xE0000)
    t[0xE0001] = t[0xE007F] = None
    t[ord("_")] = " "
    spaced = dict(t)
    for ch in _ZERO_WIDTH:
        spaced[ord(ch)] = " "
    return t, spaced


def _decoded(text: str, budget: list[int]) -> Iterator[tuple[int, int, str]]:
    """(start, end, text) of each base64 / hex run of `text` that decodes to printable UTF-8."""
    for m in _ENCODED.finditer(text):
        if budget[0] <= 0 or budget[1] <= 0:
            return
        run = m.group(0)
        raw: bytes | None = None
        hexrun = run.replace(" ", "").replace(":", "")
        try:
            if len(hexrun) % 2 == 0 and all(c in "0123456789abcdefABCDEF" for c in hexrun):
                raw = binascii.unhexlify(hexrun)
            else:
                padded = run + "=" * (-len(run) % 4)
                raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            continue
        budget[0] -= 1
        budget[1] -= len(raw)
        try:
            plain = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if plain and len(_PRINTABLE.findall(plain)) >= 0.9 * len(plain):
            yield m.start(), m.end(), plain


class View:
    """One reading of a request's texts: `text`, and how it was made (for `origins`)."""

    __slots__ = ("text", "sep", "spaced")

    def __init__(self, text: str, sep: str, spaced: bool) -> None:
        self.text, self.sep, self.spaced = text, sep, spaced


def _plain(texts: Sequence[str]) -> bool:
    """Whether every view would be the texts joined as they are (nothing folds, splits or decodes)."""
    return len(texts) <= 1 and all(t.isascii() and "_" not in t and not _ENCODED.search(t) for t in texts)


def as_is(texts: Sequence[str]) -> bool:
    """Whether the views hold nothing the texts as they are do not: one plain text, already read."""
    return len(texts) == 1 and _plain(texts)


def views(texts: Sequence[str]) -> tuple[View, View, View | None]:
    """(joined with nothing, joined with a space, joined with a space and zero-widths read as spaces:
    None when no text has one). The views are the raw texts joined when nothing needs folding."""
    if _plain(texts):
        raw = "".join(texts)
        return View(raw, "", False), View(raw, " ", False), None
    dropped, spaced = _tables()
    budget = [MAX_DECODED, MAX_DECODED_BYTES]
    extra = [plain for t in texts for _, _, plain in _decoded(t, budget)]
    folded = [t.translate(dropped) for t in texts]
    tail = [plain.translate(dropped) for plain in extra]
    tight = View("".join(folded + tail), "", False)
    loose = View(" ".join(folded + tail), " ", False)
    zw = None
    if any(ch in t for t in texts for ch in _ZERO_WIDTH):
        zw = View(" ".join([t.translate(spaced) for t in texts] + tail), " ", True)
    return tight, loose, zw


def origins(texts: Sequence[str], view: View) -> list[tuple[int, int, int]]:
    """For each character of `view.text`: (text index, start, end) of the original characters it came
    from (a decoded run's characters: the whole encoded run). Slow (a Python loop): only for redacting
    what a view found and the texts as they are did not."""
    dropped, spaced = _tables()
    table = spaced if view.spaced else dropped
    out: list[tuple[int, int, int]] = []
    for i, t in enumerate(texts):
        if i and view.sep:
            out.append((i, 0, 0))  # the separator: nothing of the original
        for j, ch in enumerate(t):
            out.extend([(i, j, j + 1)] * len(ch.translate(table)))
    budget = [MAX_DECODED, MAX_DECODED_BYTES]
    for i, t in enumerate(texts):
        for start, end, plain in _decoded(t, budget):
            if view.sep:
                out.append((i, start, start))
            out.extend([(i, start, end)] * len(plain.translate(dropped)))
    return out
