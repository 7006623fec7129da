"""Second check after a semantic-cache vector hit: do the two questions ask for the same answer?

MiniLM mean-pools word vectors, so it is blind to what often decides an answer: word order ("fraction
to percentage" vs "percentage to fraction"), negation, a changed number, an opposite word, another
entity in the same frame ("capital of France" vs "capital of Germany"). Cosine alone reached at best
precision 0.71 on eval/cache/paraphrases.jsonl. `same_question` rejects a candidate hit when the two
texts differ in one of these, by rules over categories of words, none keyed on particular questions
(`why_different` names the rule; rule 6 by its kind: scope, time, question, modality):

1. numbers: equal multisets of numbers (digits and decimals, number words "two".."twenty", tens,
   hundred/thousand/million/billion combined into one value, ordinals, "half", "twice", "squared",
   Roman numerals II..XX; "one" alone is skipped: it is as often the article or a pronoun, "a new
   one"), and equal arithmetic symbols (+ - * / ^) when both texts use symbols;
2. negation: the same count of negation markers (not, n't, cannot, no, never, without, except, none,
   nothing, neither, nor, unless, avoid, lack, and "non" as in "non-root"...);
3. antonyms: one text holds one side of a common opposite pair (enable/disable, import/export,
   first/last, in/out, on/off, plus/minus...) or a synonym of it the other text lacks, and the other
   text the other side; or one word is the other with a negating prefix (un-, in-, im-, dis-, non-,
   de-...: "lock" / "unlock", "mutable" / "immutable", the rest at least 4 letters);
4. direction: around each relational marker (to, into, from, than, vs, over, before, after, per, but,
   instead, / ^), the content word before it must not come wholly after the content word after it in
   the other text ("Fahrenheit to Celsius" / "Celsius to Fahrenheit"); "to" counts only after a
   content word ("string to int"), not after a frame word ("the way to reverse"). A plain preposition
   (in, of, for, on, with...) must not have its two content words exchanged ("grams in an ounce" /
   "ounces in a gram"); nor may any two neighbouring specific words (at most 4 tokens apart) appear in
   the other order with the same words between them ("miles is 5 kilometers" / "kilometers is 5
   miles"), unless the link is symmetric (and, or, with, between, vs);
5. key terms. Words fall in three classes: FRAME words (function words and the wording of a request:
   "what's the way to", "can you explain", "is it possible") never count; LIGHT words (common verbs,
   quantifiers, vague qualifiers: get, find, make, use, all, every, new, main, number, available) may be
   added freely; every other word is SPECIFIC. A word of one text is matched in the other by the same
   stem, a synonym (a word shares a group with it: ~100 groups of common and domain words, buy/purchase,
   error/issue/problem, cancel/terminate/stop, app/software/product, js/javascript; a word may sit in
   several groups), a few multi-word expressions read as one word ("turn on" = enable, "money back" =
   refund, "log out" = logout), a unit abbreviation, one being a >=4-letter prefix of the other, or an
   acronym spelled by the initials of consecutive words ("SSO" / "single sign-on"). Rejected: an
   unmatched ENTITY (capitalized mid-sentence, ALL CAPS, CamelCase, digits/dots/underscores, `code`,
   'quoted'), whatever the other side; and a SUBSTITUTION: an unmatched specific word on one side while
   the other side has an unmatched content word (specific or light) of its own. So lower-case "capital
   of peru" vs "capital of chile" is caught without a gazetteer, and "find duplicates" vs "remove
   duplicates" too, while a paraphrase that only adds words ("my account", "a Python list") passes. A
   paraphrase that swaps a specific word for a synonym outside the table is rejected: a cache miss, the
   safe side, and most of the recall this check costs;
6. tags: words that pin down what is asked. When both texts carry tags of a kind they must share one:
   scope (one X / single / individual vs all / every / each / entire / whole / both vs part / partial),
   time deixis (this / current vs next / coming vs last / previous / past before a time noun; today,
   yesterday, tomorrow, ago), tense (will / shall / 'll vs was / were / did, not "was wondering"), the
   kind of answer (who: person, when / what year: time, where: place, why / what causes / reason:
   reason, how many / much / long / far / old...: quantity; a wh-word right after a content word is a
   relative pronoun and does not count; plain "how" and "what" are compatible with anything), modality
   (can / could / may / possible vs must / required / necessary / "do I need", "do I have to"). A tag on
   one side only is an addition and passes ("all files" / "files").

Known blind spots: adding a specific word is allowed, so "reviewing pull requests" vs "writing pull
request descriptions" passes; order is checked only around markers, prepositions and neighbouring
specific words with the same link; present vs past tense ("who is" / "who was") is not told apart (too
many paraphrases change it); scope or time on one side only passes.

Pure and model-free; regexes and word lists are built at import as immutable constants. Only the words
that differ between the texts are stemmed, and rule 4 runs only for pairs every other rule accepted.
Measured on a shared 2-core box: ~70-80 us per pair on the short questions of the evaluation sets.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------- words

# Frame words: function words and the wording of a request ("what's the way to", "can you explain",
# "is it possible to"). They never tell two questions apart.
_FRAME_WORDS = """
a an the this that these those there here it its they them their i me my mine we us our you your yours
he she him her his hers someone somebody something anything everything anyone everyone ones
of in on at for with by about as to from into onto out up off via per within through over than then
and or so if whether because since while also too again ever yet
really actually basically simply exactly please thanks thank hi hello hey ok okay
is are was were be been being am do does did done doing have has had having can could would should
will shall may might must need needs want wants wanted like let lets
what which who whom whose where when why how
way ways method methods approach steps step process procedure command commands thing things stuff
option options possible possibly able tell explain describe know understand help try trying tried
wonder wondering curious question easy easiest easier simple simplest quickly best good right correct
proper properly recommended sure very quite pretty kind lot lots anyway between among
ideal optimal perfect grateful appreciate kindly hoping syntax example examples snippet
"""

# Light words: common verbs, qualifiers and quantifiers. One text may add them freely ("get", "all
# my data"), but as the counterpart of a specific word they mark a substitution: "find duplicates" vs
# "remove duplicates", "every 5 seconds" vs "once after 5 seconds".
_LIGHT_WORDS = """
get gets getting got obtain make makes making made find finds finding found locate see look use uses
using used go goes going give take put keep show mean means meaning happen happens happened cause causes
caused reason reasons only just even still already now today currently new main basic common general
standard usual typical same other another certain particular specific given various true such
some any all every each many much more most few several
number amount count value values feature features period people person exist exists existing
available exact exactly currently recent recently latest actual tip tips advice suggestion
suggestions idea ideas mostly mainly primarily largely calculate compute determine evaluate
repeatedly certain copy copies
"""

# Plain prepositions: "X in Y" in one text and "Y in X" in the other is the same relation with its
# arguments swapped ("centimeters in an inch" / "inches in a centimeter"), rule 4 too.
_PREPOSITIONS = frozenset("in of for on at with by about between among within".split())

# Relational markers: the content words around them must keep their order (rule 4).
_MARKERS = frozenset(
    "to into onto from than vs versus over before after per instead rather but towards toward unlike "
    "/ ^ ÷ →".split()
)

_NEGATIONS = frozenset(
    "not no never none nothing nobody nowhere neither nor without except excluding exclude excludes "
    "unless avoid avoiding lack lacking non".split()
)

# Common opposites, each pair written once; stemmed at import like every text word.
_ANTONYM_PAIRS = """
increase:decrease increase:reduce add:remove add:subtract plus:minus multiply:divide times:divided
enable:disable activate:deactivate upload:download encrypt:decrypt encode:decode compress:decompress
serialize:deserialize zip:unzip min:max minimum:maximum ascending:descending import:export buy:sell
open:close start:stop start:end begin:end true:false before:after left:right up:down in:out
inner:outer first:last largest:smallest biggest:smallest highest:lowest high:low higher:lower
more:less most:least best:worst better:worse long:short longest:shortest fast:slow faster:slower
fastest:slowest hot:cold warm:cool input:output read:write send:receive push:pull push:pop
install:uninstall subscribe:unsubscribe lock:unlock show:hide accept:decline accept:reject
allow:deny allow:block include:exclude upgrade:downgrade connect:disconnect mount:unmount login:logout
upper:lower uppercase:lowercase positive:negative even:odd north:south east:west above:below
over:under top:bottom front:back horizontal:vertical row:column prefix:suffix head:tail
public:private sync:async synchronous:asynchronous static:dynamic local:remote client:server
frontend:backend inbound:outbound incoming:outgoing debit:credit income:expense profit:loss win:lose
gain:loss benefit:risk benefits:risks advantage:disadvantage pros:cons past:future
yesterday:tomorrow morning:evening day:night summer:winter old:new oldest:newest young:old male:female
men:women boy:girl black:white light:dark wet:dry full:empty heavy:light thick:thin wide:narrow
deep:shallow rich:poor cheap:expensive easy:hard easy:difficult safe:dangerous legal:illegal
valid:invalid visible:invisible possible:impossible correct:incorrect agree:disagree like:dislike
love:hate always:never all:none everything:nothing with:without keep:discard keep:delete save:discard
enqueue:dequeue insert:delete create:delete create:destroy attach:detach join:split merge:split
join:leave enter:exit arrive:depart encrypted:decrypted import:export freeze:boil freezing:boiling
maximum:minimum internal:external include:omit sum:difference union:intersection parent:child
before:since early:late earlier:later on:off online:offline pause:resume
heavier:lighter older:younger oldest:youngest tallest:shortest taller:shorter cheaper:pricier
stronger:weaker strongest:weakest more:fewer many:few larger:smaller bigger:smaller rise:fall
earliest:latest next:previous arrival:departure sunrise:sunset inhale:exhale mutable:immutable
ban:unban hire:fire borrow:lend lend:repay
"""

# Interchangeable in any question; the first word of each group stands for the group.
_SYNONYM_GROUPS = """
big large huge
biggest largest
small little tiny
smallest tiniest
fast quick rapid speedy quickly
speed velocity fast
start begin commence launch
finish end complete
buy purchase
remove delete erase discard drop
cancel terminate discontinue stop end quit halt
quit exit stop
change modify update edit alter switch adjust
show display list view print
picture image photo pic img
cost price fee pricing
fix repair resolve solve troubleshoot
error issue problem trouble bug fault
choose pick select
allow permit
car automobile
child kid
answer reply respond
combine merge concatenate
total sum
author writer write wrote written
discover find found
earth world globe planet
autumn fall
speak talk spoken
enable activate
disable deactivate
folder directory dir
website site
movie film
hard difficult
make create generate
make prepare cook
annual annually yearly year
monthly month
weekly week
daily day
refund reimbursement reimburse
laptop notebook
computer pc
symptom sign indication
reason cause
polite politely courteous courteously
decline reject refuse deny
invitation invite
email mail
adult grown
reduce minimize decrease lower lessen cut
increase raise boost
temperature temp
travel visit trip
us usa american america
uk british
declare define
constant const
split break
run call invoke execute
check verify test confirm
copy clone replicate duplicate
app application program software product service tool
comply compliant compliance conform
limit maximum max cap quota
bill billing charge pay payment
plan subscription tier
format type
ask request
read load
convert turn transform cast parse
int integer
str string
dict dictionary
arr array
func function fn
obj object
msg message
db database
repo repository
env environment
config configuration cfg
pkg package
lib library
auth authentication
docs documentation doc
pwd password
js javascript
ts typescript
py python
k8s kubernetes
postgres postgresql
chance probability odds likelihood
distance far
deep depth
old age
long length
long duration
tall high height
tallest highest
differentiate derivative derive
integrate integral
item product goods merchandise
shipping delivery shipment ship deliver
appear arrive
summary summarize summarise recap overview
short brief briefly concise
average mean
represent denote signify stand mean
"""

# Unit abbreviations and their word (after stemming).
_UNIT_WORDS = {
    "km": "kilometer",
    "cm": "centimeter",
    "mm": "millimeter",
    "kg": "kilogram",
    "lb": "pound",
    "lbs": "pound",
    "ft": "foot",
    "feet": "foot",
    "mi": "mile",
    "hr": "hour",
    "hrs": "hour",
    "sec": "second",
    "secs": "second",
    "°f": "fahrenheit",
    "°c": "celsius",
    "pct": "percent",
}

_UNITS = {
    "zero": 0,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "dozen": 12,
    "twice": 2,
    "thrice": 3,
    "half": 0.5,
    "squared": 2,
    "cubed": 3,
}
_ORDINALS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
    "thirteenth": 13,
    "fourteenth": 14,
    "fifteenth": 15,
    "sixteenth": 16,
    "seventeenth": 17,
    "eighteenth": 18,
    "nineteenth": 19,
    "twentieth": 20,
    "hundredth": 100,
    "thousandth": 1000,
}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
_ROMAN = {
    "II": 2,
    "III": 3,
    "IV": 4,
    "VI": 6,
    "VII": 7,
    "VIII": 8,
    "IX": 9,
    "XI": 11,
    "XII": 12,
    "XIII": 13,
    "XIV": 14,
    "XV": 15,
    "XVI": 16,
    "XVII": 17,
    "XVIII": 18,
    "XIX": 19,
    "XX": 20,
}
# "a second", "per second": the time unit, not the ordinal.
_UNIT_SECOND_BEFORE = frozenset("a an per each every one".split())

# Prefixes that negate the rest of the word ("non-root" is also the negation "non": rule 2).
_NEG_PREFIXES = frozenset("un in im il ir dis non de anti mis".split())
_ARTICLES = frozenset("a an the".split())
# Links under which exchanging the two words keeps the question ("cats and dogs", "tea or coffee").
_SYMMETRIC = frozenset("and or & , vs versus plus with between nor both".split())

# Rule 6, tags: words that pin down scope, time, tense, the kind of answer (wh-words) and modality.
# Two texts that both carry tags of one kind must share one ("one file" / "all files", "this weekend" /
# "next weekend", "who" / "when", "can I" / "must I"); a tag on one side only is an addition.
_SCOPE = {
    "single": "single",
    "individual": "single",
    "all": "all",
    "every": "all",
    "each": "all",
    "entire": "all",
    "whole": "all",
    "everything": "all",
    "both": "all",
    "part": "part",
    "partial": "part",
    "partially": "part",
    "portion": "part",
}
_TIME_NOUNS = frozenset(
    """day days week weeks weekend weekends month months year years quarter quarters season semester night
    morning afternoon evening decade century hour minute monday tuesday wednesday thursday friday saturday
    sunday january february march april may june july august september october november december spring
    summer autumn fall winter""".split()
)
_DEICTIC = {
    "this": "now",
    "current": "now",
    "next": "future",
    "coming": "future",
    "upcoming": "future",
    "last": "past",
    "previous": "past",
    "past": "past",
    "prior": "past",
}
_DAYS = {"today": "now", "tonight": "now", "yesterday": "past", "tomorrow": "future", "ago": "past"}
_WH = {
    "who": "person",
    "whom": "person",
    "whose": "person",
    "when": "time",
    "where": "place",
    "why": "reason",
}
_HOW_MUCH = frozenset(
    """many much long far old big tall often large deep high heavy fast early late soon expensive wide
    small hot cold""".split()
)
_WHAT_TIME = frozenset("year time date day month century decade".split())
_PERMIT = frozenset("can could may able allowed possible permitted".split())
_OBLIGE = frozenset("must required require requires mandatory necessary compulsory obligatory".split())
_PRONOUNS = frozenset("i we you he she they it".split())
_NOT_PAST = frozenset("wondering hoping thinking trying told going".split())
_TAG_WORDS = frozenset(
    [
        *_SCOPE,
        *_DEICTIC,
        *_DAYS,
        *_WH,
        *_PERMIT,
        *_OBLIGE,
        "one",
        "how",
        "what",
        "which",
        "will",
        "shall",
        "was",
        "were",
        "did",
        "need",
        "have",
        "has",
        "reason",
        "reasons",
        "ll",
    ]
)
_TAG_KINDS = ("scope", "time", "tense", "wh", "modal")
_TAG_REASON = {"scope": "scope", "time": "time", "tense": "time", "wh": "question", "modal": "modality"}

# Multi-word expressions read as one word ("turn on" is "enable", "money back" a "refund").
_PHRASES = {
    "turn": ((("on",), "enable"), (("off",), "disable"), (("down",), "decline")),
    "switch": ((("on",), "enable"), (("off",), "disable")),
    "money": ((("back",), "refund"),),
    "send": ((("back",), "return"),),
    "give": ((("back",), "return"),),
    "get": ((("rid", "of"), "remove"),),
    "roll": ((("back",), "undo"),),
    "throw": ((("away",), "discard"),),
    "show": ((("up",), "appear"),),
    "shows": ((("up",), "appear"),),
    "log": ((("in",), "login"), (("out",), "logout")),
    "sign": ((("in",), "login"), (("out",), "logout"), (("up",), "register")),
    "set": ((("up",), "configure"),),
    "grown": ((("-", "up"), "adult"), (("up",), "adult")),
    "come": ((("down",), "fall"),),
    "find": ((("out",), "find"),),
    "figure": ((("out",), "find"),),
    "look": ((("up",), "find"),),
}

# ------------------------------------------------------------------------------------------ regexes
# Speed: one regex tokenizes, the word lists are looked up as written, and only the words that differ
# between the two texts (few, for a candidate hit) are stemmed in Python; the loops over every token
# are comprehensions that touch only capitalized, numeric or relational tokens.

_TOKEN = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\w+(?:[.'’]\w+)*(?:\+\+|#)?|[^\w\s]")
_ARITH = re.compile(r"[+*/^×÷]|(?<=[\s\d])-(?=[\s\d])")
_QUOTED = re.compile(r"`([^`]+)`|(?<![\w'’])['‘\"“]([^'’\"”\s][^'’\"”\n]{0,60}?)['’\"”](?!\w)")
_NUMBER = re.compile(r"(\d+(?:[.,]\d+)*)(\w*)")
_CONTRACTIONS = ("n't", "'s", "'ll", "'re", "'ve", "'m", "'d", "'")
_ORDINAL_SUFFIXES = frozenset(["st", "nd", "rd", "th", ""])
_SENTENCE_END = frozenset(".?!;:")
_PUNCT = frozenset("+*/^×÷→%-.?!;:,()[]{}<>=&|~@$\"'’`")


def _stem(word: str) -> str:
    """Light suffix stripping: plural/verb -s, -ing, -ed, final -e. Consistency matters more than
    linguistics: "making" and "make" both become "mak"."""
    w = word
    n = len(w)
    if n > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif n > 4 and w.endswith(("sses", "ches", "shes", "xes", "zes")):
        w = w[:-2]
    elif n > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    elif n > 5 and w.endswith("ing"):
        w = _undouble(w[:-3])
    elif n > 4 and w.endswith("ied"):
        w = w[:-3] + "y"
    elif n > 4 and w.endswith("ed") and not w.endswith("eed"):
        w = _undouble(w[:-2])
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def _undouble(w: str) -> str:
    if len(w) > 2 and w[-1] == w[-2] and w[-1] not in "lsz":
        return w[:-1]
    return w


def _build_synonyms() -> dict[str, frozenset[str]]:
    """stem -> the groups (named by their first word's stem) it belongs to; a word may sit in several
    ("stop": cancel, quit), and two words match when they share a group."""
    table: dict[str, frozenset[str]] = {}
    for group in _SYNONYM_GROUPS.strip().splitlines():
        words = group.split()
        head = "=" + _stem(words[0])
        # The plural too: the stemmer makes "movies" "movy" but "movie" "movi".
        for stem in {_stem(form) for w in words for form in (w, w + "s")}:
            table[stem] = table.get(stem, frozenset()) | {head}
    return table


_GROUPS = _build_synonyms()
_NO_GROUPS: frozenset[str] = frozenset()


def _canonical(word: str) -> str:
    stem = _stem(word)
    return _UNIT_STEMS.get(stem, stem)


_UNIT_STEMS = {k: _stem(v) for k, v in _UNIT_WORDS.items()}


def _canonicals(words: str) -> frozenset[str]:
    return frozenset(_canonical(w) for w in words.split())


def _keys(stem: str) -> frozenset[str]:
    """The stem and its synonym groups: what it matches, and what an opposite is keyed by."""
    groups = _GROUPS.get(stem)
    return groups | {stem} if groups else frozenset((stem,))


def _build_antonyms() -> dict[str, frozenset[str]]:
    # Opposition carries over to synonyms: add:remove makes "drop" the opposite of "add" too.
    table: dict[str, frozenset[str]] = {}
    for pair in _ANTONYM_PAIRS.split():
        x, y = (_keys(_canonical(w)) for w in pair.split(":"))
        for k in x:
            table[k] = table.get(k, frozenset()) | y
        for k in y:
            table[k] = table.get(k, frozenset()) | x
    return table


_ANTONYM_OF = _build_antonyms()
# Word lists as written (a token is looked up before any stemming) and as stems (for the words that
# differ between the texts, which are stemmed).
_NUMBER_WORDS = frozenset([*_UNITS, *_ORDINALS, *_SCALES, "one"])
_FRAME_RAW = frozenset(_FRAME_WORDS.split()) | _MARKERS | _NEGATIONS | _NUMBER_WORDS | _PUNCT
_LIGHT_RAW = frozenset(_LIGHT_WORDS.split()) - _FRAME_RAW
_FRAME = _canonicals(_FRAME_WORDS) | _canonicals(" ".join(_MARKERS | _NEGATIONS))
_LIGHT = _canonicals(_LIGHT_WORDS) - _FRAME


# --------------------------------------------------------------------------------------- analysis


@dataclass(frozen=True, slots=True)
class Analysis:
    numbers: tuple[float, ...]  # sorted
    arith: tuple[str, ...]  # sorted arithmetic symbols
    negations: int
    words: tuple[str, ...]  # every token, lower case, contractions and possessives cut, in text order
    content: frozenset[str]  # words minus frame/negation/marker/number words and punctuation
    entities: frozenset[str]  # content words written as names or technical terms, quoted phrases
    acronyms: frozenset[str]  # entities written in ALL CAPS
    tags: frozenset[tuple[str, str]]  # (kind, value): ("scope", "all"), ("wh", "person")... rule 6

    # Rule 4 runs last and only for pairs every other rule accepted, so its context is derived lazily.
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """(content word before, after) around each relational marker."""
        return _marker_pairs(list(self.words), set(self.entities), _MARKERS)

    def swaps(self) -> tuple[tuple[str, str, str], ...]:
        """(preposition, content word before, after) around each plain preposition."""
        words = list(self.words)
        return tuple((words[i], x, y) for i, x, y in _around(words, set(self.entities), _PREPOSITIONS, False))


def analyze(text: str) -> Analysis:
    if text.isupper():  # shouting carries no capitalization signal
        text = text.lower()
    quoted: list[str] = []
    if "`" in text or " '" in text or '"' in text or "‘" in text or "“" in text or text.startswith("'"):
        for m in _QUOTED.finditer(text):
            quoted.append(" ".join(_stem(w.lower()) for w in (m.group(1) or m.group(2)).split()))
        text = _QUOTED.sub(" ", text)
    arith = sorted(_ARITH.findall(text)) if any(c in text for c in "+-*/^×÷") else []
    raw = _TOKEN.findall(text)
    words = " ".join(raw).lower().replace("’", "'").split(" ")
    negations = 0
    # Contractions and possessives: "didn't" -> "did" (+1 negation), "what's" -> "what".
    for i in [i for i, w in enumerate(words) if "'" in w] if "'" in text or "’" in text else []:
        w = words[i]
        if w.endswith("n't") or w == "cannot":
            negations += 1
            w = {"can't": "can", "won't": "will"}.get(w, w[:-3])
        else:
            w = next((w[: -len(c)] for c in _CONTRACTIONS if w.endswith(c)), w)
        words[i] = w or "'"
    negations += sum(map(_NEGATIONS.__contains__, words)) + words.count("cannot")
    if "%" in text:
        words = ["percent" if w == "%" else w for w in words]
    if "°" in text:  # "100°F": the unit's word
        for i in [i for i, w in enumerate(raw) if w == "°" and i + 1 < len(raw) and raw[i + 1] in ("F", "C")]:
            words[i + 1] = raw[i + 1] = _UNIT_WORDS["°" + raw[i + 1].lower()]
    numbers: list[float] = []
    entities: set[str] = set()
    acronyms: set[str] = set()
    # The few tokens that are not plain lower-case words: capitals, digits, symbols, punctuation.
    for i in [i for i, w in enumerate(raw) if w not in _PUNCT and (not w.islower() or not w.isalpha())]:
        tok = raw[i]
        first = tok[0]
        if first.isdigit():
            num = _NUMBER.match(tok)
            if num:
                digits, rest = num.group(1), num.group(2)
                digits = (
                    digits.replace(",", "")
                    if len(digits) > 4 and digits[-4] == ","
                    else digits.replace(",", ".")
                )
                try:
                    numbers.append(float(digits))
                except ValueError:  # "1.2.3": a version, a term rather than a quantity
                    entities.add(words[i])
                    continue
                if rest not in _ORDINAL_SUFFIXES:  # "2FA", "2x", "24h": the number, then a word
                    words[i] = rest.lower()
                    if rest.isupper() and len(rest) >= 2:
                        entities.add(words[i])
                        acronyms.add(words[i])
            continue
        if not first.isalpha():
            continue
        if tok in _ROMAN:
            numbers.append(float(_ROMAN[tok]))
            words[i] = "#"
            continue
        bare = words[i]
        if tok.isalpha():
            if len(tok) >= 2 and tok.isupper():
                entities.add(bare)  # an acronym, wherever it stands
                acronyms.add(bare)
            elif not tok[1:].islower() and len(tok) > 1:
                entities.add(bare)  # CamelCase: JavaScript
            elif first.isupper() and i > 0 and raw[i - 1] not in _SENTENCE_END and tok != "I":
                entities.add(bare)  # a name: capitalized, not at the start of a sentence
        elif not bare.isalpha() or (not first.islower() and i > 0 and raw[i - 1] not in _SENTENCE_END):
            entities.add(bare)  # Node.js, snake_case, C++, v2; or a capitalized possessive
    if not _NUMBER_WORDS.isdisjoint(words):
        numbers.extend(_number_words(words))
    if not _PHRASES.keys().isdisjoint(words):
        words = _join_phrases(words)
    tags = _tags(words) if not _TAG_WORDS.isdisjoint(words) else frozenset()
    content = frozenset(w for w in frozenset(words).difference(_FRAME_RAW) if w[0].isalpha())
    words.extend(quoted)
    return Analysis(
        numbers=tuple(sorted(numbers)),
        arith=tuple(arith),
        negations=negations,
        words=tuple(words),
        content=content.union(quoted),
        entities=frozenset(entities & content).union(quoted),
        acronyms=frozenset(acronyms & content),
        tags=tags,
    )


def _join_phrases(words: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    n = len(words)
    for k in [k for k, w in enumerate(words) if w in _PHRASES]:
        if k < i:
            continue
        for rest, one in _PHRASES[words[k]]:
            if tuple(words[k + 1 : k + 1 + len(rest)]) == rest:
                out.extend(words[i:k])
                out.append(one)
                i = k + 1 + len(rest)
                break
    out.extend(words[i:n])
    return out


def _tags(words: list[str]) -> frozenset[tuple[str, str]]:
    """Rule 6's tags; a wh-word right after a content word is a relative pronoun ("people who"), not a
    question about a person."""
    tags: set[tuple[str, str]] = set()
    n = len(words)
    for i in [i for i, w in enumerate(words) if w in _TAG_WORDS]:
        w = words[i]
        prev = words[i - 1] if i else ""
        nxt = words[i + 1] if i + 1 < n else ""
        if w in _SCOPE:
            if w != "all" or prev != "at":
                tags.add(("scope", _SCOPE[w]))
        elif w == "one":
            if nxt and nxt[0].isalpha() and (nxt == "of" or nxt not in _FRAME_RAW) and prev not in _ARTICLES:
                tags.add(("scope", "single"))
        elif w in _DEICTIC:
            if nxt in _TIME_NOUNS:
                tags.add(("time", _DEICTIC[w]))
        elif w in _DAYS:
            tags.add(("time", _DAYS[w]))
        elif w in ("will", "shall", "ll"):
            tags.add(("tense", "future"))
        elif w in ("was", "were", "did"):
            if nxt not in _NOT_PAST and not (nxt in _PRONOUNS and i + 2 < n and words[i + 2] in _NOT_PAST):
                tags.add(("tense", "past"))
        elif w in _PERMIT:
            tags.add(("modal", "permit"))
        elif w in _OBLIGE:
            tags.add(("modal", "oblige"))
        elif w in ("need", "have", "has"):
            # "do I need (to)", "do I have to": an obligation; "I need to" states a want.
            if i >= 2 and prev in _PRONOUNS and words[i - 2] in ("do", "does", "did", "will"):
                if w == "need" or nxt == "to":
                    tags.add(("modal", "oblige"))
        elif w in ("reason", "reasons"):
            tags.add(("wh", "reason"))
        elif prev and prev[0].isalpha() and prev not in _FRAME_RAW:
            continue  # a relative pronoun
        elif w in _WH:
            tags.add(("wh", _WH[w]))
        elif w == "how":
            if nxt in _HOW_MUCH:
                tags.add(("wh", "quantity"))
        elif nxt in _WHAT_TIME:  # what / which year
            tags.add(("wh", "time"))
        elif nxt in ("cause", "causes", "caused", "make", "makes", "made"):
            tags.add(("wh", "reason"))
    return frozenset(tags)


def _number_words(low: list[str]) -> list[float]:
    """Numbers written as words; adjacent ones combine ("two hundred fifty" -> 250)."""
    found = [i for i, w in enumerate(low) if w in _NUMBER_WORDS]
    values: list[float] = []
    total = current = 0.0
    open_run = False
    last = -2
    for i in found:
        w = low[i]
        if open_run and i != last + 1:
            values.append(total + current)
            total = current = 0.0
            open_run = False
        last = i
        if w in _ORDINALS:
            if w == "second" and i > 0 and (low[i - 1] in _UNIT_SECOND_BEFORE or low[i - 1][0].isdigit()):
                continue  # "a second", "per second", "5 second": the time unit
            if open_run:
                values.append(total + current)
                total = current = 0.0
                open_run = False
            values.append(float(_ORDINALS[w]))
            continue
        if w == "one" and not (open_run or (i + 1 < len(low) and low[i + 1] in _SCALES)):
            continue  # the article or a pronoun as often as a number ("a new one")
        if w in _SCALES:
            current = (current or 1.0) * _SCALES[w]
            if _SCALES[w] >= 1000:
                total += current
                current = 0.0
        else:
            current += float(_UNITS.get(w, 1))
        open_run = True
    if open_run:
        values.append(total + current)
    return values


def _marker_pairs(
    words: list[str], entities: set[str], markers: frozenset[str]
) -> tuple[tuple[str, str], ...]:
    return tuple((x, y) for _, x, y in _around(words, entities, markers, True))


def _around(
    words: list[str], entities: set[str], markers: frozenset[str], infinitive_to: bool
) -> list[tuple[int, str, str]]:
    """(index, nearest content word before, nearest after) for each marker. "to" counts only right
    after a content word: "string to int" orders two things, "the way to reverse" starts an infinitive."""
    out: list[tuple[int, str, str]] = []
    if markers.isdisjoint(words):
        return out
    n = len(words)
    for i in [i for i, w in enumerate(words) if w in markers]:
        if words[i] in entities:
            continue
        if infinitive_to and words[i] == "to" and not (i > 0 and _ordered(words[i - 1])):
            continue
        before = next((words[j] for j in range(i - 1, max(-1, i - 6), -1) if _ordered(words[j])), "")
        after = next((words[j] for j in range(i + 1, min(n, i + 6)) if _ordered(words[j])), "")
        if before and after and before != after:
            out.append((i, before, after))
    return out


def _ordered(word: str) -> bool:
    """A word whose order matters: a specific content word or a number."""
    if word[0].isdigit():
        return True
    return word not in _FRAME_RAW and word not in _LIGHT_RAW and word[0].isalpha()


# ------------------------------------------------------------------------------------------ checks


def why_different(asked: str, stored: str) -> str | None:
    """The first rule telling the two questions apart ("numbers", "negation", ...), or None."""
    if asked == stored:
        return None
    a, b = analyze(asked), analyze(stored)
    if a.numbers != b.numbers or (a.arith and b.arith and a.arith != b.arith):
        return "numbers"
    if a.negations != b.negations:
        return "negation"
    # Only the words that differ are stemmed: canonical form -> the words it came from.
    diff_a = _canon_map(frozenset(a.words) - frozenset(b.words))
    diff_b = _canon_map(frozenset(b.words) - frozenset(a.words))
    if _opposed(diff_a.keys() - diff_b.keys(), diff_b.keys() - diff_a.keys()):
        return "antonym"
    if a.tags and b.tags and a.tags != b.tags:
        for kind in _TAG_KINDS:
            tags_a = {t for t in a.tags if t[0] == kind}
            tags_b = {t for t in b.tags if t[0] == kind}
            if tags_a and tags_b and tags_a.isdisjoint(tags_b):
                return _TAG_REASON[kind]
    if not _terms_covered(a, b, diff_a, diff_b):
        return "key_terms"
    if not (_order_kept(a.pairs(), b) and _order_kept(b.pairs(), a)):
        return "direction"
    if _swapped(a.swaps(), b.swaps()) or _roles_swapped(a.words, b.words):
        return "direction"
    return None


def _opposed(only_a: set[str], only_b: set[str]) -> bool:
    """Rule 3: a word of one text whose opposite (or an opposite's synonym) is in the other only; or the
    same word negated by a prefix ("root" / "nonroot", "mutable" / "immutable", "lock" / "unlock")."""
    if not only_a or not only_b:
        return False
    keys_b: set[str] = set()
    for y in only_b:
        keys_b |= _keys(y)
    for x in only_a:
        for k in _keys(x):
            opposite = _ANTONYM_OF.get(k)
            if opposite and not opposite.isdisjoint(keys_b):
                return True
    return any(_prefix_negated(x, only_b) for x in only_a) or any(_prefix_negated(y, only_a) for y in only_b)


def _prefix_negated(word: str, others: set[str]) -> bool:
    n = len(word)
    return any(
        len(o) >= 4 and n - len(o) in (2, 3, 4) and word.endswith(o) and word[: n - len(o)] in _NEG_PREFIXES
        for o in others
    )


def same_question(asked: str, stored: str) -> bool:
    """False when the questions differ in something that decides the answer (see the module doc)."""
    return why_different(asked, stored) is None


def _canon_map(words: frozenset[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for w in words:
        if w and w[0].isalpha():
            stem = _stem(w)
            out.setdefault(_UNIT_STEMS.get(stem, stem), []).append(w)
    return out


def _prefix_related(stem: str, others: list[str], other_set: frozenset[str]) -> bool:
    """One a >=4-letter prefix of the other: abbreviations and derivations ("dict"/"dictionary",
    "percent"/"percentage", "differ"/"difference")."""
    if len(stem) < 4:
        return False
    if any(stem[:k] in other_set for k in range(4, len(stem))):
        return True
    k = bisect_left(others, stem)
    return k < len(others) and others[k].startswith(stem)


def _terms_covered(
    a: Analysis, b: Analysis, diff_a: dict[str, list[str]], diff_b: dict[str, list[str]]
) -> bool:
    """Rule 5: no entity of one text missing from the other, and no substitution: a specific word
    missing from one side while the other side has a content word (specific or light) of its own."""
    left_a = _missing(diff_a, diff_b, a, b)
    left_b = _missing(diff_b, diff_a, b, a)
    if not left_a and not left_b:
        return True
    # An acronym may stand for consecutive words of the other text ("SSO" / "single sign-on"); those
    # words are then accounted for too.
    for x, y, left_x, left_y in ((a, b, left_a, left_b), (b, a, left_b, left_a)):
        for canon, word in [(c, w) for c, w in left_x.items() if w in x.acronyms]:
            used = _expansion(word, y.words)
            if used:
                del left_x[canon]
                for c in [c for c, w in left_y.items() if w in used]:
                    del left_y[c]
    if any(w in a.entities for w in left_a.values()) or any(w in b.entities for w in left_b.values()):
        return False
    specific_a = any(c not in _LIGHT for c in left_a)
    specific_b = any(c not in _LIGHT for c in left_b)
    return not ((specific_a and left_b) or (specific_b and left_a))


def _missing(
    mine: dict[str, list[str]], theirs: dict[str, list[str]], me: Analysis, them: Analysis
) -> dict[str, str]:
    """My content words (canonical -> a word as written) found in no form in the other text."""
    left: dict[str, str] = {}
    other_stems: frozenset[str] | None = None
    others: list[str] = []
    their_groups: set[str] | None = None
    for canon, forms in mine.items():
        if canon in theirs or canon in _FRAME:
            continue
        groups = _GROUPS.get(canon)
        if groups:
            if their_groups is None:
                their_groups = set()
                for c in theirs:
                    their_groups |= _GROUPS.get(c, _NO_GROUPS)
            if not groups.isdisjoint(their_groups):
                continue
        word = next((w for w in forms if w in me.content), "")
        if not word:
            continue
        if other_stems is None:
            other_stems = them.content.union(theirs)  # words as written and the differing ones' stems
            others = sorted(other_stems)
        if word not in me.entities and _prefix_related(canon, others, other_stems):
            continue
        left[canon] = word
    return left


def _expansion(acronym: str, words: tuple[str, ...]) -> frozenset[str]:
    """The consecutive words (punctuation skipped: "sign-on") whose initials spell `acronym`."""
    at = [i for i, w in enumerate(words) if w[0].isalnum()]
    start = "".join(words[i][0] for i in at).find(acronym)
    return frozenset(words[i] for i in at[start : start + len(acronym)]) if start >= 0 else frozenset()


def _roles_swapped(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Two specific words close together in one text and in the other order in the other, with the same
    words between them ("miles is 5 kilometers" / "kilometers is 5 miles"): the roles are exchanged
    whatever links them, unless the link is symmetric ("X and Y", "X or Y")."""
    spans_a = _spans(a)
    if not spans_a:
        return False
    spans_b = _spans(b)
    return any((y, mid, x) in spans_b for x, mid, y in spans_a if x != y)


def _spans(words: tuple[str, ...]) -> set[tuple[str, tuple[str, ...], str]]:
    """(stem, the words between minus articles, stem) for specific words at most 4 apart."""
    at = [i for i, w in enumerate(words) if w and w[0].isalpha() and _ordered(w)]
    out: set[tuple[str, tuple[str, ...], str]] = set()
    for i, j in zip(at, at[1:], strict=False):
        if j - i <= 4:
            mid = tuple(w for w in words[i + 1 : j] if w not in _ARTICLES)
            if _SYMMETRIC.isdisjoint(mid):
                out.add((_stem(words[i]), mid, _stem(words[j])))
    return out


def _swapped(a: tuple[tuple[str, str, str], ...], b: tuple[tuple[str, str, str], ...]) -> bool:
    """The same preposition with its two content words exchanged; stemmed only where the prepositions
    match, so "inches" / "inch" count as one word."""
    if not a or not b:
        return False
    shared = {p for p, _, _ in a} & {p for p, _, _ in b}
    if not shared:
        return False
    reversed_b = {(p, _stem(y), _stem(x)) for p, x, y in b if p in shared}
    return any((p, _stem(x), _stem(y)) in reversed_b for p, x, y in a if p in shared)


def _order_kept(pairs: tuple[tuple[str, str], ...], other: Analysis) -> bool:
    """Each (x before marker, y after it) must not appear reversed in the other text: y wholly before x."""
    if not pairs:
        return True
    words = other.words
    for x, y in pairs:
        if x not in words or y not in words:
            continue
        xs = [i for i, w in enumerate(words) if w == x]
        ys = [i for i, w in enumerate(words) if w == y]
        if max(ys) < min(xs):
            return False
    return True
