"""The vocabulary of the NUMBER check (:mod:`medverify.judge.checks.numbers`): units and
their conversion to one base unit per dimension, frequency periods, number words, and the
words around a number that make it a name, a statistic, a bound, an age or an interval."""

from __future__ import annotations

from medverify.judge.checks.text import word_list, words


def _table(text: str) -> dict[str, tuple[str, float]]:
    """``dimension factor word word ...`` lines -> {word: (dimension, factor)}."""
    out: dict[str, tuple[str, float]] = {}
    for line in text.strip().splitlines():
        dim, factor, *names = word_list(line)
        out.update((w, (dim, float(factor))) for w in names)
    return out


UNITS = _table("""
mass 1 mg milligram milligrams
mass 1000 g gram grams gm
mass 1e6 kg kilogram kilograms kgs
mass 0.001 mcg µg μg ug microgram micrograms
mass 1e-6 ng nanogram nanograms
volume 1 ml milliliter milliliters millilitre millilitres cc
volume 1000 l liter liters litre litres
volume 100 dl deciliter deciliters
volume 0.001 µl μl ul microliter microliters
iu 1 iu
units 1 unit units
percent 1 % percent percentage
time 1.1574074074074073e-05 s sec secs second seconds
time 0.0006944444444444445 min mins minute minutes
time 0.041666666666666664 h hr hrs hour hours
time 1 day days
time 7 wk wks week weeks
time 30.4375 mo month months
time 365.25 yr yrs year years
time 3652.5 decade decades
length 1 mm millimeter millimeters millimetre millimetres
length 10 cm centimeter centimeters centimetre centimetres
length 1000 meter meters metre metres
length 1e6 km kilometer kilometers kilometre kilometres
length 304.8 ft feet foot
length 25.4 inch inches
amount 1 mmol millimole millimoles
amount 0.001 µmol μmol umol
amount 1e-06 nmol
meq 1 meq
energy 1 kcal kilocalorie kilocalories calories
rate 1 bpm
""")
PERIODS = {
    "day": "day", "days": "day", "daily": "day", "d": "day", "night": "day", "nightly": "day",
    "week": "week", "weekly": "week", "wk": "week", "month": "month", "monthly": "month",
    "year": "year", "yearly": "year", "annually": "year", "annual": "year", "hour": "hour",
    "hourly": "hour", "h": "hour",
}
NUMBER_WORDS = {w: float(i) for i, w in enumerate(word_list(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"))}
NUMBER_WORDS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
                      "eighty": 80, "ninety": 90, "hundred": 100, "dozen": 12})
TIMES_WORDS = {"once": 1.0, "twice": 2.0, "thrice": 3.0}
DOSING = {"BID": 2.0, "TID": 3.0, "QID": 4.0, "QD": 1.0}
MULTIPLIERS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "hundred": 1e2}
LABELS = words(
    "type types stage stages grade grades phase phases class step tier group groups arm arms "
    "cohort figure fig figs table tables no nos number chapter section visit cycle wave "
    "version generation category schedule day week month year dose patient case sample study "
    "trial item model ref refs vol issue page pp p covid sars il cd hla apoe trisomy "
    "chromosome exon codon gene grade level levels score stage lead leads tlr mmp tnf "
    "nct gse gsm january february march april may june july august september october "
    "november december jan feb mar apr jun jul aug sep sept oct nov dec")
"""Words before a number that make it a name or a position ("type 2", "day 7", "p. 12")."""
STAT_WORDS = words("p P CI OR HR RR IRR aOR aHR AOR AHR SD SE SEM IQR n N r R AUC")
"""Statistics labels, as written (case matters: "OR" is an odds ratio, "or" is not)."""
GE = words("over above exceeding beyond least > ≥ more greater older higher longer")
LE = words("under below within most up < ≤ less fewer younger lower shorter")
APPROX = words("about approximately around nearly almost roughly approx ~ ∼ ≈ circa ca "
                    "estimated some")
DIGITS = frozenset("0123456789")
CURRENCY = frozenset("$€£¥")
NOT_COUNTS = words(
    "another other others more less way ways within without across against among along "
    "around through throughout toward towards versus despite including following "
    "respectively compared")
SPACES = frozenset(" \u00a0\u2009\u202f")
SEPARATORS = words(", - – — to and or & /")
AGE_WORDS = words("aged age ages")
AGE_AFTER = words("old older younger")
INTERVAL_WORDS = words("every each q")
CONTEXT_SKIP = APPROX | GE | LE | words(
    "only just another additional further total overall mean median average respectively "
    "nearly")
