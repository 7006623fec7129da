"""Second check after a semantic-cache vector hit: are the two questions provably the same request?

v3 is a whitelist. v2 listed the differences that change an answer (numbers, negation, antonyms...) and
accepted the rest; it scored 0.99 on the sets it was written against and 0.70 on a blind one, because
every category nobody listed (singular vs plural, "a file" vs "all files", active vs passive, an added
qualifier, the same word on both sides of "into", pytest vs unittest...) passed. v3 accepts a pair only
when both texts reduce to the SAME token sequence under normalizations that cannot change the answer,
and rejects everything else. A paraphrase that rewords the content is a cache miss (the safe side); the
cache serves only what is the same question asked with other frame words, spelling or formatting.

`normal_form(text)` applies, in order:

1. text: Unicode NFKC, lower case, curly quotes made straight, emoji dropped; "$40" -> "40 dollar",
   "15%" -> "15 percent", "10,000" -> "10000"; "w/" -> "with", "w/o" -> "without"; a hyphen between
   letters is a space ("two-factor", "e-mail").
2. contractions: can't / cannot -> can not, won't -> will not, n't -> not, 're, 've, 'm, 'll -> are,
   have, am, will; 's -> is after what / where / who / how / it / that / there..., let's -> let us; an
   apostrophe-less "whats", "dont", "im", "doesnt"... the same ("its", "id", "ill", "lets", "were" are
   words, left alone). 'd (had or would) and the possessive 's stay tokens of their own.
3. tokens: words (with inner dots and a trailing ++ or #: node.js, c++, c#), numbers, and the symbols
   that carry meaning (+ - * / ^ = < > &); sentence punctuation becomes a boundary (used by the frame
   rules, then dropped); every other character is dropped.
4. word maps (not in a metalinguistic question, see below): texting forms (u -> you, ur -> your, r ->
   are, pls / plz -> please, thx / ty -> thanks, wanna -> want to, gonna -> going to), British spellings
   (colour, centre, organise, travelling, metre...), a table of TRUE synonyms, each safe in any context
   (purchase -> buy, obtain / receive -> get, modify / alter -> change, delete -> remove, begin /
   commence -> start, automobile -> car, directory -> folder, dict -> dictionary, js -> javascript...)
   and unit abbreviations (km -> kilometer, lb / lbs -> pound, hr -> hour...).
5. frames (`cache._frames`), which never change the answer: greetings, fillers, "can you tell me",
   please / thanks at a sentence edge, dropped at a clause start; every way of asking how -> "how do
   i", is it possible to -> "can i".
6. numbers (not in a metalinguistic question): number words -> digits ("twenty five" -> 25, "one
   hundred and five" -> 105, "one" -> 1 wherever it stands, consistently on both sides), 1st..20th ->
   first..twentieth; multi-word synonyms (money back -> refund, sign in / login / log on -> log in, sign
   out / logout -> log out, e mail -> email, setup -> set up, 2 factor authentication / 2fa...); a plural
   right after a number other than 1 is singular ("10 miles" -> "10 mile": the number already says it).
7. articles (a, an, the) dropped; a clause-initial phrase "in / on / with / using / for X," (up to 4
   words, ended by a comma) moved to the end ("In Python, how do I..." = "How do I ... in Python");
   "between A and B" sorted (symmetric); an embedded question's final is / are moved after its wh-word
   ("what a closure is" -> "what is a closure", after "explain what..." lost its frame).

Then the two sequences must be identical: same words (exact surface forms after the maps; no stemming,
so "file" / "files" differ), same numbers, same order. Nothing may be added, dropped or moved except
frame words and the two order-free phrases above. Two texts that reduce to nothing (pure greetings or
thanks) must be equal before the frames are dropped ("hi" is not "thanks").

Metalinguistic questions (mean, define, spell, translate, pronounce, synonym, say, word, quotes...)
talk about words, so a mapping would change them ("what does 'purchase' mean" is not "what does 'buy'
mean"): when either text is one, steps 4 and 6 and the please/thanks rule are off for both.

`why_different` names the first difference: "numbers" (the numbers differ), "added" (one sequence is
the other plus words), "order" (same words, another order), "words" (a word of one is not in the other),
"empty" (nothing but frames, and different frames).

Pure and model-free; tables and regexes are immutable module constants. ~15-25 us per pair on the
short questions of the evaluation sets (a shared 2-core box).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Final

from cache._frames import strip_frames
from cache._lexicon import (
    ARTICLES,
    BARE_CONTRACTIONS,
    BOUNDARY,
    DIGIT,
    HEDGES,
    IS_BEFORE_S,
    METALINGUISTIC,
    NUMBER_WORDS,
    ORDINAL_WORDS,
    PHRASE,
    PHRASES,
    SCALES,
    SPELLING,
    SYNONYMS,
    TENS,
    TEXTING,
    UNITS,
    UNITS_ABBR,
)

# ------------------------------------------------------------------------------------------ regexes

_EMOJI_CLASS: Final = "[\U0001f000-\U0001faff\u2600-\u27bf\ufe0f\u200d\u2b00-\u2bff]"
_EDGE_EMOJI: Final = re.compile(f"^(?:{_EMOJI_CLASS}|\\s)+|(?:{_EMOJI_CLASS}|\\s)+$")
_GLUED_UNIT: Final = re.compile(
    r"\b(\d+(?:\.\d+)?)(kb|mb|gb|tb|km|kg|cm|mm|lbs?|oz|ms|hz|khz|mhz|ghz|px|hrs?|secs?|ft|mph|kph)\b"
)
_EMOTICON: Final = re.compile(r"(?<!\S)[:;]-?[()\[\]dpo/|]+(?!\S)")
_ALL_CAPS: Final = re.compile(r"\b[A-Z]{2,}\b")
_MONEY: Final = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")
_EURO: Final = re.compile(r"€\s?(\d[\d,]*(?:\.\d+)?)")
_PERCENT: Final = re.compile(r"(\d)\s?%")
_THOUSANDS: Final = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")
_WITH: Final = re.compile(r"(?<!\w)w/o(?!\w)|(?<!\w)w/(?=\s)")
_HYPHEN: Final = re.compile(r"(?<=[^\W\d])-(?=[^\W\d])")
_QUOTES: Final = str.maketrans({"’": "'", "‘": "'", "`": "'", "“": '"', "”": '"'})
_CONTRACTION_FIXED: Final = (
    (re.compile(r"\b(?:can't|cannot)\b"), "can not"),
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"\bshan't\b"), "shall not"),
    (re.compile(r"\blet's\b"), "let us"),
    (re.compile(r"n't\b"), " not"),
    (re.compile(r"'re\b"), " are"),
    (re.compile(r"'ve\b"), " have"),
    (re.compile(r"'m\b"), " am"),
    (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'d\b"), " 'd"),
)
_APOSTROPHE_S: Final = re.compile(r"\b(\w+)'s\b")
# Words, then sentence punctuation (a boundary), quotes (dropped), any other symbol (a token: "[]" is not
# "{}").
_TOKEN: Final = re.compile(r"'d|\w+(?:\.\w+)*(?:\+\+|#)?|[.,!?;:]+|['\"]|[^\w\s]")
_ORDINAL_DIGITS: Final = re.compile(r"^(\d+)(?:st|nd|rd|th)$")

# An embedded question ends in is / are: "what a closure is" -> "what is a closure".
_EMBEDDED: Final = frozenset("what who where".split())
_LEADING_PREP: Final = frozenset("in on with using for".split())
_BETWEEN_END: Final = frozenset("in for of on with when if to from".split()) | {BOUNDARY}


# ----------------------------------------------------------------------------------------- pipeline


def _prepare(text: str) -> str:
    """Step 1 and 2: characters, money / percent / thousands, hyphens, contractions. Each rewrite runs
    only when its trigger character is present: most questions need few of them."""
    s = text.lower()
    if not s.isascii():
        s = unicodedata.normalize("NFKC", s).translate(_QUOTES)
        s = _EDGE_EMOJI.sub(" ", s)  # decoration; an emoji inside the question may be what it asks about
    if ":" in s or ";" in s:
        s = _EMOTICON.sub(" ", s)
    if DIGIT.search(s):
        s = _GLUED_UNIT.sub(r"\1 \2", s)
        if "$" in s:
            s = _MONEY.sub(r" \1 dollar ", s)
        if "€" in s:
            s = _EURO.sub(r" \1 euro ", s)
        if "," in s:
            s = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
        if "%" in s:
            s = _PERCENT.sub(r"\1 percent ", s)
    if "w/" in s:
        s = _WITH.sub(lambda m: " without " if m.group(0) == "w/o" else " with ", s)
    if "-" in s:
        s = _HYPHEN.sub(" ", s)
    if "'" in s or "cannot" in s:
        for pattern, repl in _CONTRACTION_FIXED:
            s = pattern.sub(repl, s)
        s = _APOSTROPHE_S.sub(lambda m: m.group(1) + (" is" if m.group(1) in IS_BEFORE_S else " 's"), s)
    return s


def _tokens(s: str, mapped: bool) -> list[str]:
    """Step 3: tokens, sentence punctuation as boundaries, bare contractions and texting forms (the
    frames are written in full words: "can u tell me" is "can you tell me")."""
    out: list[str] = []
    for tok in _TOKEN.findall(s):
        if tok[0] in ".,!?;:":
            if out and out[-1] != BOUNDARY:
                out.append(BOUNDARY)
            continue
        if tok in ("'", '"'):
            continue
        full = BARE_CONTRACTIONS.get(tok) or (TEXTING.get(tok) if mapped else None)
        if full:
            out.extend(full.split())
        else:
            out.append(tok)
    while out and out[-1] == BOUNDARY:
        out.pop()
    return out


def _word_maps(words: list[str], keep: frozenset[str]) -> list[str]:
    """Step 4, after the frames (so "how can i" is still a frame): spellings, synonyms, units; not for
    words written in capitals (`keep`: SQL's ALTER / MODIFY / CHANGE are not synonyms)."""
    out: list[str] = []
    for w in words:
        m = w if w in keep else SPELLING.get(w) or SYNONYMS.get(w) or UNITS_ABBR.get(w) or w
        if " " in m:
            out.extend(m.split())
        else:
            out.append(m)
    return out


def _numbers(words: list[str]) -> list[str]:
    """Step 6: number words -> digits, digit ordinals -> words, a plural after a number -> singular."""
    if NUMBER_WORDS.isdisjoint(words) and not DIGIT.search(" ".join(words)):
        return words
    out: list[str] = []
    i, n = 0, len(words)
    after_number = False
    while i < n:
        w = words[i]
        if w in NUMBER_WORDS:
            value, i = _number_at(words, i)
            out.append(str(value))
            after_number = value != 1
            continue
        if w[0].isdigit():
            m = _ORDINAL_DIGITS.match(w)
            if m and 1 <= int(m.group(1)) <= len(ORDINAL_WORDS):
                w = ORDINAL_WORDS[int(m.group(1)) - 1]
            out.append(w)
            after_number = w.isdigit() and w != "1"
        else:
            out.append(_singular(w) if after_number else w)
            after_number = False
        i += 1
    return out


def _number_at(words: list[str], i: int) -> tuple[int, int]:
    """The value of the number words starting at i and the index after them; a word extends the number
    only where it can ("twenty five", "five hundred", "hundred and five", not "two three")."""
    total = current = 0
    last = ""  # kind of the previous word: unit, teen, ten, scale
    n = len(words)
    while i < n:
        w = words[i]
        if w == "and" and last == "scale" and i + 1 < n and (words[i + 1] in UNITS or words[i + 1] in TENS):
            i += 1
            continue
        if w in UNITS and last in ("", "scale", "ten"):
            v = UNITS[w]
            if last == "ten" and not 1 <= v <= 9:
                break
            current += v
            last = "teen" if v >= 10 else "unit"
        elif w in TENS and last in ("", "scale"):
            current += TENS[w]
            last = "ten"
        elif w in SCALES and last != "scale":
            scale = SCALES[w]
            if scale == 100:
                current = (current or 1) * 100
            else:
                total += (current or 1) * scale
                current = 0
            last = "scale"
        else:
            break
        i += 1
    return total + current, i


def _singular(w: str) -> str:
    if w in UNITS_ABBR.values() or len(w) <= 3 or not w.isalpha() or w.endswith("ss"):
        return w
    if w.endswith("ies"):
        return w[:-3] + "y"
    if w.endswith(("ches", "shes", "xes", "sses", "zes")):
        return w[:-2]
    return w[:-1] if w.endswith("s") else w


def _reorder(words: list[str]) -> list[str]:
    """Step 7: the clause-initial prepositional phrase to the end, "between A and B" sorted."""
    if words and words[0] in _LEADING_PREP and BOUNDARY in words[1:6]:
        cut = words.index(BOUNDARY)
        words = words[cut + 1 :] + words[:cut]
    if "between" in words:
        b = words.index("between")
        if "and" in words[b + 1 :]:
            a = words.index("and", b + 1)
            end = a + 1
            while end < len(words) and words[end] not in _BETWEEN_END:
                end += 1
            left, right = words[b + 1 : a], words[a + 1 : end]
            if left and right and "and" not in right and BOUNDARY not in left:
                first, second = sorted((left, right))
                words = words[: b + 1] + first + ["and"] + second + words[end:]
    return words


def _invert(words: list[str]) -> list[str]:
    """An embedded question's final is / are after its wh-word: "what a closure is" -> "what is a closure"."""
    if (
        len(words) >= 3
        and words[0] in _EMBEDDED
        and words[-1] in ("is", "are")
        and words[1] not in ("is", "are")
    ):
        return [words[0], words[-1], *words[1:-1]]
    return words


def is_metalinguistic(text: str) -> bool:
    """A question about words or quoted text, where word maps would change what is asked."""
    if any(q in text for q in "'\"`‘’“”") and re.search(r"(?:^|\s)['\"`‘“]\w", text):
        return True
    return any(w in METALINGUISTIC for w in re.findall(r"[a-z]+", text.lower()))


def normal_form(text: str, mapped: bool = True) -> tuple[str, ...]:
    """The content of `text`: tokens after every meaning-preserving normalization (module docstring).
    `mapped=False` is the metalinguistic mode: no word maps, numbers or please / thanks rule."""
    words = _tokens(_prepare(text), mapped)
    s = strip_frames(" " + " ".join(words) + " ", mapped)
    words = s.split()
    if mapped:
        keep = frozenset(w.lower() for w in _ALL_CAPS.findall(text))
        s = " " + " ".join(_numbers(_word_maps(words, keep))) + " "
        s = PHRASE.sub(lambda m: PHRASES[m.group(0)], s)
        words = s.split()
    words = [w for w in words if w not in ARTICLES and w not in HEDGES]
    while words and words[0] == BOUNDARY:
        words.pop(0)
    words = _reorder(words)
    clauses: list[list[str]] = [[]]
    for w in words:
        if w == BOUNDARY:
            clauses.append([])
        else:
            clauses[-1].append(w)
    return tuple(w for clause in clauses for w in _invert(clause))


def why_different(asked: str, stored: str) -> str | None:
    """None when the two texts are the same question, else what tells them apart: "numbers", "added",
    "order", "words" or "empty" (module docstring)."""
    if asked == stored:
        return None
    mapped = not (is_metalinguistic(asked) or is_metalinguistic(stored))
    a, b = normal_form(asked, mapped), normal_form(stored, mapped)
    if a == b:
        if a:
            return None
        # Nothing but frames: the same only if the frames are ("hi" is not "thanks").
        raw_a = [w for w in _tokens(_prepare(asked), mapped) if w != BOUNDARY]
        raw_b = [w for w in _tokens(_prepare(stored), mapped) if w != BOUNDARY]
        return None if raw_a == raw_b else "empty"
    if [w for w in a if w[0].isdigit()] != [w for w in b if w[0].isdigit()]:
        return "numbers"
    ca, cb = Counter(a), Counter(b)
    if ca == cb:
        return "order"
    if not ca - cb or not cb - ca:
        return "added"
    return "words"


def same_question(asked: str, stored: str) -> bool:
    """True only when `asked` and `stored` are provably the same request (equal normal forms)."""
    return why_different(asked, stored) is None
