"""Expected `nltk.word_tokenize(caption.lower())` output of a real NLTK on constructed captions with quotes
and apostrophes in every position: the reference for CHAIR's tokenizer (evalsuite/metrics/chair_tokenize.py,
tests/unit/test_chair_tokenize.py). Run it once per NLTK version, each in its own scratch venv:

    python3 -m venv /tmp/nltk381 && /tmp/nltk381/bin/pip install nltk==3.8.1
    python3 -m venv /tmp/nltk310 && /tmp/nltk310/bin/pip install nltk==3.10.4
    /tmp/nltk381/bin/python tests/data/chair_tokenizer/make_expected.py   # -> expected_nltk3.8.1.json
    /tmp/nltk310/bin/python tests/data/chair_tokenizer/make_expected.py   # -> expected_nltk3.10.4.json

Both use the official English punkt tables committed in tests/data/golden/nltk_data/tokenizers/punkt_tab
(NLTK's Apache-2.0 data). NLTK >= 3.9 reads them directly; NLTK 3.8.1 reads only the pickled model
`tokenizers/punkt/english.pickle` (not installable offline), so for 3.8.1 this script fills 3.8.1's own
`PunktParameters` from the same four tables and hands its own `PunktSentenceTokenizer` to `word_tokenize`
(the pickle holds exactly these parameters: abbreviations, collocations, sentence starters, orthographic
context). Everything else, including every regular expression, is the installed NLTK's.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PUNKT_TAB = HERE.parent / "golden" / "nltk_data" / "tokenizers" / "punkt_tab" / "english"

QUOTES = ["'", "''", '"', "`", "``", "'''", "\u2019", "\u2018", "\u201c", "\u201d", "\u00ab", "\u00bb", "\u201e",
          "\u2032"]
CLITICS = ["'s", "'S", "'a", "'n", "'m", "'t", "'d", "'ll", "'re", "'ve", "n't", "'x", "'es", "'9", "'_", "'\u00e9"]
WORDS = ["dog", "there", "a", "man", "cat", "it", "rock", "o", "x", "3", "table", "can", "won", "dogs", "bus"]
DASHES = ["\u2012", "\u2013", "\u2014", "\u2015", "-", "--"]
SPACES = [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u2028"]
FIXED = [
    "there'a dog", "there'a", "'a dog", "a dog'a", "a dog 'a cat", "a dog' a cat", "the dog's bowl's lid",
    "the dogs' bowls'", "it's a cat's toy.", "IT'S A CAT'S TOY.", "a man'S hat", "rock'n'roll", "o'clock",
    "y'all", "ma'am", "d'ye", "more'n", "'tis", "'twas", "'Tis fine", "it 'tis", "can't won't don't shan't",
    "cannot gonna gotta wanna gimme lemme", "i'm you're they've we'd she'll", "isn't it?", "Don't!",
    "a ''quoted'' word", "a \"quoted\" word", "\"quoted\" at start", "ends with \"quote\"", "``tex'' style",
    "`single` backticks", "he said 'hi' to me", "he said 'hi.' to me", "'hi', he said.", "she said, 'a cat.'",
    "the end.'", "the end.\"", "the end.'\"", "the end. '", "the end.''", "a dog.' a cat.", "a dog.\" A cat.",
    "\u201cnice\u201d dog", "the \u201cnice.\u201d dog. Then", "the \u2018nice\u2019 dog", "it\u2019s a dog\u2019s life",
    "the dog\u2019s.", "\u00abchat\u00bb et \u201echien\u201c", "a dog.\u201d The cat.", "a dog.\u2019 The cat.",
    "a dog.\u00bb The cat.", "a dog!\u201d The cat?\u2019 No.", "wait\u2014what", "a \u2013 b", "1990\u20132000",
    "a\u2015b", "a\u2012b", "a--b", "a---b", "' ' '", "''", "'", "\"", "`", "'.", "'s", "' s", "x'", "x' ", "x''",
    "x'''y", "a'b'c'd", "a' 'b", "the 'a' team", "the 'a team", "the a' team", "it's\tfine", "it's\nfine",
    "dog's\n\ncat's", "a dog'\tand", "they'll\nsee", "don't\ttouch", "the dogs'\nbowls", "'s\t", "there'a\tdog",
    "a dog's", "dog 's", "dog ' s", "dog '  s", "the end .'", "the 5' pole", "a 6'2\" man", "rock 'n' roll",
    "\u00e9t\u00e9'a caf\u00e9's", "caf\u00e9'\u00e9", "na\u00efve'a", "\u00fc'b \u00df's", "e\u0301'a e\u0301's",
    "\u0430'\u0431", "\u6771\u4eac'a", "a\u00ad'a", "x\u200b'a", "\u212a'a", "\u017f'a", "a'\u017f", "a'K",
    "Mr. O'Neill's cat.", "Dr. Smith's dog. It's big.", "e.g. 'a' or 'b'.", "U.S.A.'s flag.", "no. 5's",
    "He said \"Stop.\" She didn't.", "A dog. 'Hello,' it said. \"Bye.\"", "(a dog's bowl.)", "[it's] {x's} <y's>",
    "a dog's; a cat's: a bird's, a fish's! a cow's? yes.", "50% o'er & 'neath", "a 'quote' -- and 'another'",
    "what's that?' he asked.", "it is 'fine'.", "it is 'fine.'", "it is \"fine\".", "it is \"fine.\"",
    "it is fine.'\n\nNext one.", "First.\n\n'Second' one.", "A dog.\nA cat's bowl.\n", "  'lead  ", "trail'  ",
    # the final-period rules next to long runs of closers and spaces (3.9 made one of them possessive)
    "a. " + " " * 300 + "x", "a. ) ' \" ) x", "a.)) ", "dog.  \t", "a.' \" )  ", "a.\u00a0", "a.\u2028b",
    "a " + ". " * 50 + "b's", "'" * 40 + "a", "a" + "'a" * 40, "it's" + "\t's" * 20,
    # control characters and odd whitespace next to quotes
    "dog'\x1c cat", "a '\x1f b", "cat'\x85 dog", "the 's\x1d x", "x's\x0bthe", "y'\x0cz", "\u2028'a\u2029's",
]


def _generated(n: int, seed: int) -> list[str]:
    """Captions glued from the pieces above: a quote, clitic or dash at the start, middle or end of a
    word, a sentence or the caption, around periods, commas and every kind of whitespace."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 7)):
            kind = rng.random()
            word = rng.choice(WORDS)
            if kind < 0.3:
                q = rng.choice(QUOTES + CLITICS)
                where = rng.randrange(4)
                word = [q + word, word + q, word[: len(word) // 2] + q + word[len(word) // 2:], q][where]
            elif kind < 0.4:
                word = word + rng.choice(DASHES) + rng.choice(WORDS)
            parts.append(word)
            r = rng.random()
            parts.append(rng.choice(SPACES) if r < 0.6 else rng.choice([". ", ", ", ".", "! ", "? ", ".\n", "; ", ": "])
                         + (rng.choice(QUOTES) if r > 0.8 else ""))
        text = "".join(parts)
        out.append(text.capitalize() if rng.random() < 0.3 else text)
    return out


def captions() -> list[str]:
    return FIXED + _generated(1500, seed=0)


def _word_tokenize():
    import nltk
    from nltk import word_tokenize

    nltk.data.path[:0] = [str(PUNKT_TAB.parents[2])]
    if tuple(int(x) for x in nltk.__version__.split(".")[:2]) >= (3, 9):
        return word_tokenize
    from collections import defaultdict

    import nltk.tokenize as nt
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    def lines(name):
        return [line for line in (PUNKT_TAB / name).read_text(encoding="utf-8").split("\n") if line]

    params = PunktParameters()
    params.abbrev_types = set(lines("abbrev_types.txt"))
    params.collocations = {tuple(line.split("\t")) for line in lines("collocations.tab")}
    params.sent_starters = set(lines("sent_starters.txt"))
    params.ortho_context = defaultdict(int, {w: int(v) for w, v in (line.split("\t") for line in lines("ortho_context.tab"))})
    punkt = PunktSentenceTokenizer()
    punkt._params = params
    real_load = nt.load
    nt.load = lambda resource, *a, **k: punkt if resource == "tokenizers/punkt/english.pickle" else real_load(resource, *a, **k)
    return word_tokenize


def main() -> None:
    import nltk

    tokenize = _word_tokenize()
    texts = captions()
    doc = {"nltk": nltk.__version__, "python": sys.version.split()[0],
           "what": "nltk.word_tokenize(caption.lower()) per caption, made by make_expected.py",
           "captions": texts, "tokens": [tokenize(t.lower()) for t in texts]}
    out = HERE / f"expected_nltk{nltk.__version__}.json"
    out.write_text(json.dumps(doc, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{out}: {len(texts)} captions")


if __name__ == "__main__":
    main()
