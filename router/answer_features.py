"""Cheap features of a (prompt, answer) pair for the trained answer scorer: shared by training (eval/)
and serving (router/scorers.py) so that both see exactly the same numbers.

A feature vector is sparse: {index: value}. Indices [0, HASH_BUCKETS) are hashed text features;
the named dense features follow. Hashing uses CRC-32 (stable across processes and Python versions;
`hash()` is salted per process and would make a trained artifact useless after a restart).

Hashed: answer word unigrams and bigrams ("a:"), words of the prompt's last question ("q:"), and
crosses of the prompt kind with the answer kind and its leading token ("x:"). Few-shot boilerplate is
ignored on purpose: it is identical across prompts of a task and would only encode the task.
Dense: log length, line count, code markers and language, hedging and refusal phrases, the answer's
final-answer kind (router/answers.py), whether a choice question got a bare letter.
"""

from __future__ import annotations

import math
import re
import zlib

from router.answers import final_answer, last_question, options

HASH_BUCKETS = 4096
DENSE = (
    "bias",
    "log_chars",
    "log_lines",
    "has_fence",
    "has_def",
    "lang_python",
    "lang_other",
    "hedges",
    "refusal",
    "kind_choice",
    "kind_number",
    "kind_code",
    "kind_text",
    "kind_empty",
    "bare_choice",
    "choice_expected_missing",
    "truncated",
)
N_FEATURES = HASH_BUCKETS + len(DENSE)
_DENSE_INDEX = {name: HASH_BUCKETS + i for i, name in enumerate(DENSE)}

_WORD = re.compile(r"[a-z_][a-z0-9_]*|\d+|[^\sa-z0-9_]", re.IGNORECASE)
_HEDGES = re.compile(
    r"\b(maybe|perhaps|might|possibly|not sure|unclear|i think|i believe|probably|likely|assume|guess)\b",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"\b(i cannot|i can't|i'm sorry|i am sorry|as an ai|i do not|i don't have|unable to|not possible)\b",
    re.IGNORECASE,
)
_OTHER_LANG = re.compile(r"```(?:javascript|js|java|c\+\+|cpp|c#|csharp|ruby|go|rust|php)\b|\bJavaScript\b")
_PY = re.compile(r"```python|\[PYTHON\]|\bPython\b")
# Answers are looked at up to this many characters: enough for code, bounded cost on huge outputs.
_MAX_ANSWER_CHARS = 4000
_MAX_QUESTION_CHARS = 600


def _bucket(token: str) -> int:
    return zlib.crc32(token.encode()) % HASH_BUCKETS


def _add(out: dict[int, float], index: int, value: float) -> None:
    out[index] = out.get(index, 0.0) + value


def features(prompt: str, answer: str) -> dict[int, float]:
    """Sparse feature vector of `answer` given `prompt` (pure, deterministic)."""
    text = answer[:_MAX_ANSWER_CHARS]
    question = last_question(prompt)[-_MAX_QUESTION_CHARS:]
    out: dict[int, float] = {}

    words = [w.lower() for w in _WORD.findall(text)]
    grams = [f"a:{w}" for w in words] + [f"a:{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    # 1/sqrt(n) keeps long answers from dominating the score through sheer token count.
    scale = 1.0 / math.sqrt(len(grams)) if grams else 0.0
    for g in grams:
        _add(out, _bucket(g), scale)
    qwords = [f"q:{w.lower()}" for w in _WORD.findall(question)]
    qscale = 1.0 / math.sqrt(len(qwords)) if qwords else 0.0
    for g in qwords:
        _add(out, _bucket(g), qscale)

    final = final_answer(prompt, text)
    choice_expected = bool(options(question))
    prompt_kind = "choice" if choice_expected else ("code" if "function" in question.lower() else "open")
    lead = words[0] if words else "<empty>"
    for cross in (f"x:{prompt_kind}|{final.kind}", f"x:{prompt_kind}|{lead}"):
        _add(out, _bucket(cross), 1.0)

    dense = {
        "bias": 1.0,
        "log_chars": math.log1p(len(answer)) / 8.0,
        "log_lines": math.log1p(answer.count("\n")) / 5.0,
        "has_fence": 1.0 if "```" in text or "[PYTHON]" in text else 0.0,
        "has_def": 1.0 if re.search(r"^\s*def \w+\(", text, re.MULTILINE) else 0.0,
        "lang_python": 1.0 if _PY.search(text) else 0.0,
        "lang_other": 1.0 if _OTHER_LANG.search(text) else 0.0,
        "hedges": min(len(_HEDGES.findall(text)), 5) / 5.0,
        "refusal": 1.0 if _REFUSAL.search(text) else 0.0,
        f"kind_{final.kind}": 1.0,
        "bare_choice": 1.0 if final.kind == "choice" and len(answer.strip()) <= 3 else 0.0,
        "choice_expected_missing": 1.0 if choice_expected and final.kind != "choice" else 0.0,
        "truncated": 1.0 if text.count("```") % 2 == 1 else 0.0,
    }
    for name, value in dense.items():
        if value:
            _add(out, _DENSE_INDEX[name], value)
    return out


# --- Step context: what the other cheap answers of the same request say about this one ---------------
#
# The step scorer (router/scorers.py, artifact format 2) adds these to the answer's own features. They
# are hashed strings too, in their own block after the answer features, so the artifact stays small and
# new context features need no index bookkeeping. Tier indices are the alias's tier order: a step
# scorer is trained for one alias's tier list (its artifact records the pools) and is only valid there.
CONTEXT_BUCKETS = 1024
_MAX_OTHERS = 4  # context of at most this many other answers: bounded work per scored answer


def _context_bucket(token: str) -> int:
    return N_FEATURES + zlib.crc32(token.encode()) % CONTEXT_BUCKETS


def _similarity(a: str, b: str) -> float:
    """Jaccard similarity of the word sets of two normalized final answers (code and prose answers
    rarely agree exactly, but a correct program tends to resemble another correct one)."""
    wa, wb = set(_WORD.findall(a)), set(_WORD.findall(b))
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


def context_features(prompt: str, text: str, tier: int, others: list[tuple[int, str]]) -> dict[int, float]:
    """Sparse context features of the answer `text` from tier `tier`, given the other answers of the
    request so far as (tier, text) pairs; indices in [N_FEATURES, N_FEATURES + CONTEXT_BUCKETS)."""
    question = last_question(prompt)[-_MAX_QUESTION_CHARS:]
    opts = options(question)
    pkind = "choice" if opts else ("code" if "function" in question.lower() else "open")
    mine = final_answer(prompt, text[:_MAX_ANSWER_CHARS])
    theirs = [(t, final_answer(prompt, o[:_MAX_ANSWER_CHARS])) for t, o in others[:_MAX_OTHERS]]
    agree = [(t, mine.agrees(f)) for t, f in theirs]
    n, same = len(agree), sum(a for _, a in agree)
    # Distinct final answers among all answers, and whether this one is (one of) the most common.
    values = [f"{f.kind}:{f.value}" for _, f in theirs if f.kind != "empty"]
    counts = {v: values.count(v) for v in values}
    top = max(counts.values(), default=0)
    pattern = ",".join(f"{t}{'=' if a else '!'}" for t, a in sorted(agree))
    tokens = [
        f"c:bias|{pkind}",
        f"c:tier:{tier}|{pkind}",
        f"c:n:{n}|agree:{same}|{pkind}",
        f"c:tier:{tier}|n:{n}|agree:{same}",
        f"c:pattern:{tier}|{pattern}|{pkind}",
        f"c:distinct:{len(counts) + (0 if f'{mine.kind}:{mine.value}' in counts else 1)}|n:{n}",
        f"c:plurality:{int(same + 1 >= top)}|tier:{tier}|n:{n}",
        f"c:kind:{mine.kind}|{pkind}",
    ]
    if mine.kind == "choice":
        tokens += [f"c:letter:{mine.value}|n_opts:{len(opts)}", f"c:tier:{tier}|letter:{mine.value}"]
        tokens += [f"c:pair:{tier}:{mine.value}|{t}:{f.value}" for t, f in theirs if f.kind == "choice"]
    out: dict[int, float] = {}
    for tok in tokens:
        _add(out, _context_bucket(tok), 1.0)
    if n and mine.kind in ("code", "text"):
        sim = max(_similarity(mine.value, f.value) for _, f in theirs)
        _add(out, _context_bucket(f"c:similarity|tier:{tier}"), sim)
    return out
