"""The word tables of the semantic-cache verifier (`cache.verify`): contractions, texting forms,
spellings, true synonyms, unit abbreviations, multi-word phrases, number words, articles, hedges and
the words that make a question metalinguistic. Data only (immutable module constants); the rules
that use them live in `cache.verify`, whose docstring says which table serves which step."""

from __future__ import annotations

import re
from typing import Final


def pairs(spec: str) -> dict[str, str]:
    """'a b c -> x' lines: each word on the left maps to the right-hand side."""
    out: dict[str, str] = {}
    for line in spec.strip().splitlines():
        left, right = line.split("->")
        for word in left.split():
            out[word] = right.strip()
    return out


# Contractions written without the apostrophe (texting). Only forms that are not words themselves: "its",
# "id", "ill", "lets", "were", "wed", "well", "shell", "hell", "wont" are left alone.
BARE_CONTRACTIONS: Final = pairs(
    """
    whats -> what is
    wheres -> where is
    whos -> who is
    hows -> how is
    thats -> that is
    theres -> there is
    dont -> do not
    doesnt -> does not
    didnt -> did not
    cant -> can not
    isnt -> is not
    arent -> are not
    wasnt -> was not
    werent -> were not
    hasnt -> has not
    havent -> have not
    hadnt -> had not
    shouldnt -> should not
    couldnt -> could not
    wouldnt -> would not
    im -> i am
    ive -> i have
    youre -> you are
    theyre -> they are
    """
)

# 's is "is" after these; elsewhere it is a possessive and stays a token of its own.
IS_BEFORE_S: Final = frozenset("what where who how why when which it that there here he she this".split())

# Texting forms with one reading in a question. Not "y" (the y axis), "2" / "4" (numbers), "cos".
TEXTING: Final = pairs(
    """
    u -> you
    ur -> your
    r -> are
    pls plz plse -> please
    thx thanx thnx thnks ty -> thanks
    wanna -> want to
    gonna -> going to
    abt -> about
    """
)

# British -> American spellings (a spelling, never a meaning).
SPELLING: Final = pairs(
    """
    colour -> color
    colours -> colors
    favourite -> favorite
    behaviour -> behavior
    centre -> center
    metre -> meter
    metres -> meters
    litre -> liter
    litres -> liters
    centimetre -> centimeter
    centimetres -> centimeters
    kilometre -> kilometer
    kilometres -> kilometers
    millimetre -> millimeter
    millimetres -> millimeters
    organise -> organize
    organised -> organized
    optimise -> optimize
    customise -> customize
    analyse -> analyze
    recognise -> recognize
    realise -> realize
    travelling -> traveling
    travelled -> traveled
    cancelled -> canceled
    cancelling -> canceling
    grey -> gray
    licence -> license
    defence -> defense
    programme -> program
    catalogue -> catalog
    """
)

# TRUE synonyms: words that can replace each other in any sentence a user would type, so mapping one to
# the other never merges two different questions. Near synonyms are NOT here (price / cost / fee, error /
# warning, cancel / stop, fix / resolve, big / huge, app / application): a miss is cheaper than a lie.
# The less common word maps to the more common one, whose extra senses ("get" = understand) the rare
# word never takes, so a collision needs someone to write the rare word in a sense it does not have.
SYNONYMS: Final = pairs(
    """
    purchase purchasing -> buy
    purchased -> bought
    obtain receive -> get
    obtaining receiving -> getting
    modify alter -> change
    modifying altering -> changing
    modified altered -> changed
    delete erase -> remove
    deleting erasing -> removing
    deleted erased -> removed
    begin commence -> start
    beginning commencing -> starting
    automobile -> car
    automobiles -> cars
    directory -> folder
    directories -> folders
    dict -> dictionary
    dicts -> dictionaries
    js -> javascript
    golang -> go
    postgres -> postgresql
    k8s -> kubernetes
    repo -> repository
    repos -> repositories
    config -> configuration
    info -> information
    sqrt -> square root
    large -> big
    largest -> biggest
    larger -> bigger
    difficult -> hard
    perhaps -> maybe
    anybody -> anyone
    somebody -> someone
    everybody -> everyone
    approximately -> roughly
    reply -> respond
    photograph photo -> picture
    photographs photos -> pictures
    television tv -> television
    sofa -> couch
    physician -> doctor
    mom mum -> mother
    dad -> father
    okay -> ok
    """
)

# Unit abbreviations -> the word (singular: a plural after a number is made singular too).
UNITS_ABBR: Final = pairs(
    """
    km kms -> kilometer
    cm -> centimeter
    mm -> millimeter
    kg kgs -> kilogram
    lb lbs -> pound
    oz -> ounce
    hr hrs -> hour
    sec secs -> second
    ft -> foot
    feet -> foot
    """
)

# Multi-word synonyms, matched on the token string (after numbers became digits).
PHRASES: Final = {
    "money back": "refund",
    **dict.fromkeys(("sign in", "signin", "login", "log on", "logon"), "log in"),
    **dict.fromkeys(("sign out", "signout", "logout", "log off"), "log out"),
    "signup": "sign up",
    "e mail": "email",
    "web site": "website",
    "wi fi": "wifi",
    "setup": "set up",
    "backup": "back up",
    **dict.fromkeys(("2 factor authentication", "2 factor auth", "2 fa"), "2fa"),
    "per cent": "percent",
}
PHRASE: Final = re.compile(
    "(?<= )(?:" + "|".join(sorted(map(re.escape, PHRASES), key=len, reverse=True)) + ")(?= )"
)

UNITS: Final = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen".split()
    )
}
TENS: Final = {
    w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)
}
SCALES: Final = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
NUMBER_WORDS: Final = frozenset([*UNITS, *TENS, *SCALES])
DIGIT: Final = re.compile(r"\d")
ORDINAL_WORDS: Final = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
    "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split()
)

ARTICLES: Final = frozenset("a an the".split())
# Hedges and intensifiers that never change what is asked ("what exactly is X", "is it really safe").
HEDGES: Final = frozenset("actually basically really exactly honestly".split())
BOUNDARY: Final = "|"

# A question about words: any word mapping would change what is asked.
METALINGUISTIC: Final = frozenset(
    """mean means meaning meanings define defined definition spell spelled spelling spelt translate
    translated translation pronounce pronounced pronunciation synonym synonyms antonym antonyms say said
    word words term phrase abbreviation acronym stand stands etymology rhyme rhymes letter letters
    plural singular emoji keyword operator method function command flag statement clause attribute
    property builtin directive macro""".split()
)
