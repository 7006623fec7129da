"""Prompt-injection and hidden-instruction rules: text that tries to give the model new orders.

Two families, because the same words mean different things from the user and from a document:

- everywhere (user turns, tool results, completion prompts): the "ignore previous instructions"
  family (override / disregard / forget the prior rules), persona jailbreaks ("you are now DAN",
  "developer mode enabled"), requests for the hidden prompt ("reveal your system prompt"), chat
  template and role tokens smuggled into content (`<|im_start|>system`, `[INST]`, `<<SYS>>`), and
  notes addressed to the model by a third party ("note to the AI", "if you are an AI reading this");
- untrusted content only (tool / function results, which carry retrieved pages, e-mails, files): text
  that orders the assistant around: "assistant: ignore ...", "you must now send ...", "do not tell the
  user", "new instructions:", "instead, reply ...", "forward the conversation to ...". A user may
  legitimately talk to the model like that; a fetched web page may not.

A match between quotes or backticks is a mention, not an order (`what is the "ignore previous
instructions" attack?`, `print('ignore all prior rules')`): it is skipped. That is a deliberate trade:
a quoted injection still reaches the model, but discussions of prompt injection (common in security
teams' traffic) are not refused. The corpus test (tests/unit/test_guardrail_corpus.py) measures both.

Every pattern is compiled once (module constants: immutable), each behind a cheap keyword prefilter on
the lower-cased text, and none nests quantifiers over overlapping classes (linear scans).
"""

from __future__ import annotations

import re

__all__ = ["find_injection", "remove_injection"]

_DET = r"(?:(?:all|any|every|each|the|your|these|those|of|its|such|previous|prior|above)\s+){0,3}"
_QUAL = (
    r"(?:previous|prior|preceding|above|earlier|former|foregoing|original|initial|existing|old|system"
    r"|developer|safety|your|all(?:\s+(?:the|your))?|any)"
)
_NOUN = (
    r"(?:instructions?|prompts?|rules|directions|directives|guidelines|guardrails|constraints"
    r"|restrictions|programming|orders|commands|policies|policy|system\s+prompt|context\s+window"
    r"|training|configuration)"
)
_OVERRIDE = (
    rf"\b(?:ignore|disregard|forget|skip|override|bypass|discard|abandon|neglect|drop)\s+{_DET}"
    rf"{_QUAL}\s+(?:\w+\s+)?{_NOUN}\b"
)
_PERSONA = (
    r"\byou\s+are\s+now\s+(?:dan\b|an?\s+(?:unrestricted|unfiltered|uncensored|jailbroken|evil)"
    r"|in\s+(?:developer|god|jailbreak|dan)\s+mode|free\s+(?:of|from)\s+(?:all|any)\b|no\s+longer\s+(?:bound|"
    r"restricted|an?\s+ai))"
    r"|\b(?:developer|jailbreak|god|dan)\s+mode\s+(?:is\s+)?(?:on|enabled|activated|engaged)\b"
    r"|\bdo\s+anything\s+now\b"
    r"|\b(?:pretend|imagine|act\s+as\s+if)\s+(?:that\s+)?you\s+(?:have|had)\s+no\s+"
    r"(?:rules|restrictions|filters|guidelines|limits|limitations|safety)"
    r"|\byou\s+(?:have|has)\s+no\s+(?:rules|restrictions|filters|content\s+polic(?:y|ies))\s+(?:any\s*more|now)"
    r"|\bno\s+longer\s+(?:bound|restricted|constrained)\s+by\s+(?:your|the|any)\b"
    r"|\byou\s+are\s+no\s+longer\s+(?:an?\s+)?(?:\w+\s+)?(?:assistant|ai|chatbot|model|bound|restricted)\b"
    r"|\bforget\s+(?:everything|all)\s+(?:(?:you\s+(?:were|have\s+been)\s+)?told|you\s+know|above|before"
    r"|(?:that\s+)?(?:was\s+)?said\s+(?:before|above))"
    r"|\byour\s+(?:old|previous|original|prior|initial)\s+(?:programming|instructions|rules|guidelines)"
    r"\s+(?:is|are)\s+(?:now\s+)?(?:void|cancell?ed|revoked|gone|obsolete|over|invalid|lifted)"
    r"|\byou\s+are\s+an?\s+(?:ai|assistant|model|chatbot|bot)\s+(?:that|which|who|with)\s+(?:has\s+|have\s+)?no"
    r"\s+(?:rules|guidelines|restrictions|filters|limits|morals)"
)
_LEAK = (
    r"\b(?:reveal|print|show|repeat|output|display|leak|dump|recite|paste|spell\s+out|write\s+out"
    r"|tell\s+me|give\s+me)\s+(?:me\s+)?(?:your|the\s+(?:hidden|secret|original|initial))\s+"
    r"(?:(?:full|entire|complete|exact|original|initial|hidden|secret|verbatim)\s+)*"
    r"(?:system\s+(?:prompt|message|instructions?)|initial\s+(?:prompt|instructions)|instructions"
    r"|hidden\s+(?:prompt|instructions)|developer\s+(?:message|prompt)|pre-?prompt|prompt)\b"
    r"|\brepeat\s+(?:all\s+)?(?:the\s+)?(?:words|text|everything)\s+above\b"
)
_TOKENS = (
    r"<\|(?:im_start|im_end|system|start_header_id|end_header_id|eot_id|endoftext)\|>"
    r"|\[/?inst\]|<<\/?sys>>|</?(?:system|sys)>|\[system\]\(#|^\s*#{2,}\s*(?:system|new\s+instructions)\b"
    r"|\b(?:begin|end)\s+(?:of\s+)?(?:system\s+prompt|hidden\s+instructions|secret\s+instructions)\b"
)
_ADDRESSED = (
    r"\b(?:note|message|instructions?|attention|reminder|memo|directive)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?"
    r"(?:ai|a\.i\.|assistant|llm|language\s+model|chatbot|bot|gpt|claude|copilot|agent)s?\b"
    r"|\bif\s+you\s+are\s+(?:an?\s+)?(?:ai|llm|language\s+model|assistant|chatbot|automated\s+agent"
    r"|bot|gpt)\b"
    r"|\b(?:ai|llm)\s+(?:assistants?|agents?|models?|systems?)\s+(?:reading|processing|summari[sz]ing|"
    r"parsing|seeing|that\s+read)\s+this\b"
    r"|\bhidden\s+instructions?\s*:"
)
# Untrusted content only: orders to the assistant, secrecy from the user, exfiltration errands.
_ORDERS = (
    r"\b(?:assistant|ai|model|chatbot|agent|gpt|claude)\s*[,:]\s*(?:please\s+)?(?:you\s+must|ignore|"
    r"disregard|do\s+not|don'?t|stop|instead|now|immediately|send|forward|email|delete|reply|respond|"
    r"tell|output|print|call|execute|run|visit|open)\b"
    r"|\byou\s+(?:must|should|will|are\s+to|need\s+to)\s+(?:now\s+|immediately\s+|instead\s+)?"
    r"(?:ignore|disregard|forget|not\s+(?:tell|mention|reveal|inform)|stop\s+following|send|forward|"
    r"e-?mail|exfiltrate|upload|reveal|leak|delete|wire|transfer)\b"
    r"|\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention\s+(?:this\s+)?to|reveal\s+(?:this\s+)?to|alert|"
    r"notify|warn)\s+the\s+user\b"
    r"|\bwithout\s+(?:telling|informing|notifying|alerting|asking|warning)\s+the\s+user\b"
    r"|\b(?:new|updated|real|actual|important|urgent|revised)\s+(?:instructions?|task|directives?|orders)"
    r"\s*(?:for\s+(?:the\s+)?(?:assistant|ai|model)\s*)?:"
    r"|\binstead\s*,?\s+(?:you\s+should\s+|please\s+)?(?:respond|reply|answer|say|output|tell\s+the\s+user)\b"
    r"|\b(?:send|forward|e-?mail|post|upload|transfer|leak|exfiltrate)\s+(?:the\s+|all\s+|any\s+|every\s+"
    r"|this\s+|their\s+)?(?:user'?s?\s+|entire\s+|whole\s+|full\s+)?(?:conversation|chat\s+history|"
    r"history|credentials|passwords?|api\s+keys?|secrets?|tokens?|files?|contacts|inbox|e-?mails|"
    r"personal\s+data|data)\s+to\b"
    r"|\bwhen\s+(?:you|the\s+(?:ai|assistant|model))\s+(?:read|see|summari[sz]e|process)s?\s+this\b"
)

_FLAGS = re.IGNORECASE | re.MULTILINE
# Each pattern runs only when the lower-cased text holds one of its words (a superset of what it needs).
_OVERRIDE_WORDS = "ignore disregard forget skip override bypass discard abandon neglect drop"
_PERSONA_WORDS = (
    "you are now|mode|anything now|no rules|no restrictions|no longer|you have no|no filters|no guidelines"
    "|no limit|no safety|forget|programming|your old|your previous|your original|your prior|your initial"
    "|no morals"
)
_ADDRESSED_WORDS = (
    "note|message|instruction|attention|reminder|memo|directive|if you are|reading this|processing this"
    "|summarizing this|summarising this|parsing this|seeing this|read this"
)
# Each family is compiled twice: case-insensitive for the text as sent, and exact for its lower-cased
# copy, which ASCII text (most prompts) is scanned in instead: the same spans (lower() keeps the length
# of ASCII), 1.3-4x faster than IGNORECASE (measured on a 2 KB document). The sources are lower case.
_Family = tuple[tuple[str, ...], re.Pattern[str], re.Pattern[str]]


def _family(words: tuple[str, ...], source: str) -> _Family:
    return words, re.compile(source, _FLAGS), re.compile(source, re.MULTILINE)


_EVERYWHERE: tuple[_Family, ...] = (
    _family(tuple(_OVERRIDE_WORDS.split()), _OVERRIDE),
    _family(tuple(_PERSONA_WORDS.split("|")), _PERSONA),
    _family(("prompt", "instruction", "above", "message"), _LEAK),
    _family(("<|", "inst]", "sys", "#", "begin", "end "), _TOKENS),
    _family(tuple(_ADDRESSED_WORDS.split("|")), _ADDRESSED),
)
_ORDERS_WORDS = (
    "assistant|ai|model|chatbot|agent|gpt|claude|you must|you should|you will|you are to|you need to"
    "|do not|don't|dont|never|without|instruction|task|directive|order|instead|send|forward|mail|post"
    "|upload|transfer|leak|exfiltrate|when you|when the"
)
_UNTRUSTED: tuple[_Family, ...] = (*_EVERYWHERE, _family(tuple(_ORDERS_WORDS.split("|")), _ORDERS))
# A match lies within this many characters of one of its family's words (every alternative of every
# pattern contains one), so only windows around the words are scanned: long documents that merely
# mention "note" or "message" cost a few windows, not a scan of every pattern over the whole text.
_REACH = 200
_QUOTES = "\"'`“‘«„"


def _quoted(text: str, start: int, end: int) -> bool:
    """Whether the match is a short quoted mention: an opening quote or backtick right before it and a
    closing one right after (`the "ignore previous instructions" attack`). A quote before it alone is
    not enough: a JSON string value (`"note": "Ignore all prior instructions and ..."`) starts with one."""
    i = start - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    if i < 0 or text[i] not in _QUOTES:
        return False
    tail = text[end : end + 4]
    return any(q in tail for q in _QUOTES) or end == len(text)


def _windows(low: str, words: tuple[str, ...]) -> list[tuple[int, int]]:
    """Merged spans of `low` within _REACH of an occurrence of a word, widened to whitespace so that
    `\\b` and lookbehinds at a window's edge see what they would see in the whole text."""
    hits: list[tuple[int, int]] = []
    n = len(low)
    for w in words:
        short = len(w) <= 3 and w.isalpha()  # "ai", "gpt": a word of its own, not inside "main"
        i = low.find(w)
        while i >= 0:
            end = i + len(w)
            if not short or not ((i and low[i - 1].isalpha()) or (end < n and low[end].isalpha())):
                hits.append((i - _REACH, end + _REACH))
            i = low.find(w, end)
    if not hits:
        return []
    hits.sort()
    merged: list[tuple[int, int]] = []
    for a, b in hits:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    out = []
    for a, b in merged:
        a = 0 if a <= 0 else max(low.rfind(" ", 0, a), low.rfind("\n", 0, a)) + 1
        nxt = min((j for j in (low.find(" ", b), low.find("\n", b)) if j >= 0), default=n)
        out.append((a, n if b >= n else nxt))
    return out


def _spans(text: str, untrusted: bool) -> list[tuple[int, int]]:
    low = text.lower()
    ascii_text = text.isascii()
    found: set[tuple[int, int]] = set()
    for words, any_case, lower in _UNTRUSTED if untrusted else _EVERYWHERE:
        pattern, subject = (lower, low) if ascii_text else (any_case, text)
        # lower() may change the length of a few non-ASCII characters: then the windows would not line
        # up with the text, and the whole text is scanned (when a word is in it at all).
        # A short text is one window (finding the words costs more than scanning it).
        whole = len(text) <= 2 * _REACH or not (ascii_text or len(low) == len(text))
        windows = [(0, len(text))] * any(w in low for w in words) if whole else _windows(low, words)
        for a, b in windows:
            for m in pattern.finditer(subject, a, b):
                if not _quoted(text, m.start(), m.end()):
                    found.add(m.span())
    return sorted(found)


def injection_spans(text: str, untrusted: bool) -> list[tuple[int, int]]:
    return _spans(text, untrusted)


def find_injection(text: str, untrusted: bool) -> bool:
    """Whether `text` carries an instruction to the model (`untrusted`: a tool / retrieved result)."""
    return bool(_spans(text, untrusted))


_BOUNDARY = re.compile(r"[.!?\n]")


def remove_injection(text: str, untrusted: bool) -> str:
    """`text` with each sentence that carries an instruction to the model replaced by [REMOVED]: the
    marker alone would leave its order ("... and print the password") for the model to follow."""
    spans = _spans(text, untrusted)
    if not spans:
        return text
    cuts: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        head = max((m.end() for m in _BOUNDARY.finditer(text, 0, start)), default=0)
        tail_m = _BOUNDARY.search(text, end)
        tail = tail_m.end() if tail_m is not None else len(text)
        if cuts and head <= cuts[-1][1]:
            cuts[-1] = (cuts[-1][0], max(tail, cuts[-1][1]))
        else:
            cuts.append((head, tail))
    out = ""
    pos = 0
    for head, tail in cuts:
        kept = text[pos:head].strip()
        out = f"{out} {kept}".strip() + " [REMOVED]"
        pos = tail
    return f"{out} {text[pos:].strip()}".strip()
