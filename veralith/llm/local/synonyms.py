"""A small hand-made table of general English equivalences for matching a claim to its source.

Paraphrase keeps meaning while changing words: "bought" for "purchased", "begin" for "start",
"physician" for "doctor", "colour" for "color". Each group below is one meaning; every word in it
is matched as its first word. The table is general knowledge of English (irregular verb forms,
British/American spelling, everyday synonyms), chosen to be safe: no group joins words that a
careful reader would call different facts (so no "large"/"huge", no "city"/"town").

Also here: direction words whose swap reverses a comparison ("more"/"less", "before"/"after"),
used by the contradiction checks.
"""

from __future__ import annotations

from functools import lru_cache

from veralith.llm.local.lexicon import stem

__all__ = ["DIRECTIONS", "canon", "direction"]

_GROUPS = """
buy purchase bought purchased acquire acquired
sell sold
start begin began begun commence commenced launch launched
end finish finished conclude concluded
big large
small little tiny
car automobile vehicle
doctor physician
lawyer attorney
shop store
movie film
rich wealthy
help assist aid
show demonstrate display
use utilize utilise
need require
get obtain receive received
give provide provided offer offered
make create created produce produced
build built construct constructed
die died pass_away
kill killed slay slain
choose chose chosen select selected pick picked
say said tell told
speak spoke spoken talk
write wrote written author authored
see saw seen
go went gone travel travelled traveled
come came
take took taken
find discover discovered
found founded establish established
know knew known
think thought
run ran
win won
lose lost
grow grew grown
rise rose risen
fall fell fallen
leave depart departed
hold held
keep kept
lead led
meet met
pay paid
send sent
spend spent
teach taught
bring brought
catch caught
fight fought
fly flew flown
drive drove driven
eat ate eaten
drink drank drunk
give gave given
feel felt
become became
hide hid hidden
freeze froze frozen
steal stole stolen
wear wore worn
tear tore torn
shut close closed
answer reply replied respond responded
ask inquire enquire
try attempt attempted
rapid quick fast
often frequently
maybe perhaps
about regarding concerning
enough sufficient
enormous huge
mistake error
fix repair repaired
allow permit permitted let
forbid prohibit prohibited ban banned
goal aim objective
job occupation profession
kid child children
man men
woman women
person people
mouse mice
tooth teeth
foot feet
hurry rush
color colour
center centre
theater theatre
meter metre
liter litre
favorite favourite
honor honour
labor labour
neighbor neighbour
behavior behaviour
organize organise
recognize recognise
realize realise
analyze analyse
defense defence
license licence
program programme
gray grey
catalog catalogue
aluminum aluminium
jewelry jewellery
fetus foetus
percent per_cent percentage
uk britain
tv television
phone telephone
photo photograph picture
ad advert advertisement
info information
exam examination
lab laboratory
math mathematics maths
kilometre kilometer km
kilogram kg kilo
hour hr
dollar usd
euro eur
pound gbp
receive get
sick ill
large big sizable sizeable
fast quick speedy
smart intelligent clever
famous renowned well_known
happen occur occurred
reveal disclose disclosed
decrease drop dropped decline declined reduce reduced
total overall
also additionally
because since
company firm business corporation
father dad
mother mom mum
"""

# Each line is one meaning; its first word is the canonical form. A word listed twice keeps its
# first group, and a line whose first word is already listed joins that word's group.


@lru_cache(maxsize=1)
def _table() -> dict[str, str]:
    table: dict[str, str] = {}
    for line in _GROUPS.strip().splitlines():
        words = [w.replace("_", " ") for w in line.split()]
        if len(words) < 2:
            continue
        head = table.get(stem(words[0]), stem(words[0]))
        for word in words:
            if " " in word:
                continue  # multi-word forms are listed for the reader; matching is per word
            table.setdefault(stem(word), head)
    return table


_CANON = _table()


def canon(norm: str) -> str:
    """The canonical stem of a stemmed word (itself when it has no listed synonym)."""
    return _CANON.get(norm, norm)


# Direction pairs: each word is (pair id, side). A claim that says one side where its source, in
# the same place, says the other reverses the fact.
_DIRECTION_PAIRS = """
more less fewer
higher lower
greater smaller lesser
larger smaller
bigger smaller
increase decrease
increased decreased
increases decreases
increasing decreasing
rise fall
rises falls
rose fell
risen fallen
gain loss
gained lost
before after
earlier later
above below
over under
older younger
longer shorter
faster slower
heavier lighter
maximum minimum
most least
best worst
better worse
first last
majority minority
win lose
won lost
wins loses
north south
east west
northern southern
eastern western
open closed
opened closed
allowed forbidden prohibited banned
include exclude
includes excludes
included excluded
accept reject
accepted rejected
success failure
successful unsuccessful
positive negative
true false
import export
imports exports
imported exported
buy sell
bought sold
hotter colder
warmer cooler colder
wider narrower
stronger weaker
cheaper dearer
upper lower
inside outside
up down
entry exit
arrive depart
arrived departed
always never
""".strip()


@lru_cache(maxsize=1)
def _directions() -> dict[str, tuple[int, int]]:
    table: dict[str, tuple[int, int]] = {}
    for pair_id, line in enumerate(_DIRECTION_PAIRS.splitlines()):
        words = line.split()
        # The first word is one side; every other word on the line is the opposite side.
        table.setdefault(words[0], (pair_id, 0))
        for word in words[1:]:
            table.setdefault(word, (pair_id, 1))
    return table


DIRECTIONS = frozenset(_directions())


def direction(word: str) -> tuple[int, int] | None:
    """(pair id, side) of a lowercase word that states a direction or comparison, else None."""
    return _directions().get(word)
