"""Step 5 of `cache.verify.normal_form`: the frames, which never change the answer, dropped or made
canonical on the padded token string ' tok tok | tok ' ('|' is a sentence boundary).

A greeting at the start (hi, hello there, good morning, only before punctuation or the question
itself: "hello world" stays); "quick question", "i was wondering (if you could tell me)", "can you
tell / show / explain (to) me", "i want / would like / need to know", "does anyone know", "i am
curious", "help me (understand)", "explain" before a wh-word; please / kindly / thanks / thank you (in
advance) / "any help appreciated" at the start or end of a sentence, not after say / translate / spell
/ mean ("translate thanks"); and one canonical form for asking how: how do / can / could / should I /
you / we / one, how would I, how does one, how to, how I can, explain / show me how to, what is the
(best / right / proper / recommended / correct / good) way / method to, is there a way to, what are
the steps to, what do I need to do to -> "how do i"; is it possible (for me) to, am I able to -> "can
i".
"""

from __future__ import annotations

import re
from typing import Final

_WH: Final = "how|what|why|when|where|who|which|whether|if|is|are|do|does|can|should"
_START: Final = r"(?:^ | \| )"  # a clause start: the text start or a sentence boundary

# Frames removed at a clause start (repeatedly, so "hi, quick question: can you tell me how..." goes).
_LEAD_PARTS: Final = (
    # greetings only before punctuation or the question: "hello world in rust" keeps its hello
    r"(?:hi|hello|hey|hiya|greetings|good (?:morning|afternoon|evening))"
    r"(?: there| all| everyone| guys| team| folks)?(?: \|| (?=(?:" + _WH + r"|i|my|we|our|so|just) )|(?= $))",
    r"(?:ok|okay|so|um|uh|hmm|well|also|anyway) (?:so )?(?:\| )?(?=(?:" + _WH + r"|i) )",
    r"(?:i have |got )?(?:a )?(?:quick |simple |small |silly |dumb )?question(?: for you)? \|",
    r"(?:quick|simple) question (?=(?:" + _WH + r"|i) )",
    r"(?:i )?(?:was|am|m|were|just) (?:just )?wondering(?: \|)? (?:(?:if|whether) (?:you|anyone) "
    r"(?:could|can|would|might) (?:tell me|explain(?: to me)?|help me understand) )?",
    r"(?:(?:can|could|would|will) (?:you|anyone|somebody|someone) )?(?:please )?"
    r"(?:tell|show|explain to) me (?=(?:" + _WH + r") )",
    r"(?:(?:can|could|would|will) (?:you|anyone|somebody|someone) )?(?:please )?explain (?=(?:"
    + _WH
    + r") )",
    r"(?:i (?:want|would like|'d like|need|wanted|am trying|was trying) |just want |want )to know "
    r"(?=(?:" + _WH + r") )",
    r"(?:do you|does anyone|does anybody|anyone|anybody|any idea|any ideas) (?:know )?(?=(?:" + _WH + r") )",
    r"i am curious (?:about |as to )?(?=(?:" + _WH + r") )",
    r"(?:(?:can|could|would) you )?(?:please )?help me understand (?=(?:" + _WH + r") )",
    r"(?:(?:can|could|would) you )?(?:please )?help me (?:to )?(?=\w)",
    # "can you explain X" is the request "explain X"
    r"(?:can|could|would|will) you (?:please )?(?=(?:explain|tell|show|give|write|summarize|list|describe"
    r"|translate|recommend|suggest|define|name) )",
)

# One canonical form for asking how; applied at a clause start after the lead frames.
_HOW: Final = re.compile(
    _START
    + r"(?:how (?:do|can|could|should|might|may) (?:i|you|we|one)|how would (?:i|we)|how does one|how to"
    r"|how (?:i|we) (?:can|could|should)|(?:explain|show me) how to"
    r"|what is (?:the |a )?(?:best |right |proper |recommended |correct |good )?(?:way|method) to"
    r"|is there (?:a|any) way (?:for me )?to|what are (?:the )?steps to|what do i (?:need|have) to do to) "
)
_CAN: Final = re.compile(_START + r"(?:is it possible (?:for me )?to|am i able to) ")

# please / thanks at a sentence edge, not as the word a question is about ("translate thanks").
_NOT_AFTER: Final = "".join(
    f"(?<! {w})" for w in ("say", "translate", "spell", "mean", "word", "pronounce", "respond to", "write")
)
_POLITE: Final = r"(?:please|kindly|thanks|thank you)(?: (?:so much|very much|a lot|in advance|again))?"
_POLITE_HINT: Final = re.compile(r"please|kindly|thank|appreciated|asap")
_LEAD: Final = re.compile(_START + "(?:" + "|".join(_LEAD_PARTS) + ")")
_LEAD_POLITE: Final = re.compile(
    _START + "(?:" + "|".join([*_LEAD_PARTS, "(?:" + _POLITE + r")(?: \|)? "]) + ")"
)
_POLITE_END: Final = re.compile(
    _NOT_AFTER
    + r" (?:\| )?(?:"
    + _POLITE
    + r"|any help (?:is |would be )?(?:much |greatly )?appreciated|(?:much|greatly) appreciated"
    + r"|please help|asap) (?=\||$)|(?<= you) please (?=\w)"
)


def _clause_start(m: re.Match[str]) -> str:
    """What a removed clause-initial frame leaves: the padding space, or the boundary it followed."""
    return " " if m.start() == 0 else " | "


def _squeeze(s: str) -> str:
    return " " + " ".join(s.split()) + " "


def strip_frames(s: str, mapped: bool) -> str:
    """Step 5 on the padded token string, repeated while a frame goes; `mapped=False` (a metalinguistic
    question, see `cache.verify`) leaves please / thanks alone."""
    lead = _LEAD_POLITE if mapped else _LEAD
    while True:
        s, n = lead.subn(_clause_start, s)
        if mapped and _POLITE_HINT.search(s):
            s, m = _POLITE_END.subn(" ", s)
            n += m
        if not n:
            break
        s = _squeeze(s)
    s = _HOW.sub(lambda m: _clause_start(m) + "how do i ", s)
    return _CAN.sub(lambda m: _clause_start(m) + "can i ", s)
