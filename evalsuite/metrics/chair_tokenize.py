"""`Tokenizer`: `nltk.word_tokenize(caption.lower())`, token for token, about 4x faster on captions, with
the rules of NLTK <= 3.8 ("nltk38", the default) or of the installed NLTK 3.10 ("nltk310").

Why two: the reference CHAIR scripts and the published tables ran on NLTK <= 3.8 (OPERA pins 3.8.1).
NLTK 3.9 changed three rules of its Treebank word tokenizer (nltk/tokenize/destructive.py), two of its
Punkt sentence splitter (nltk/tokenize/punkt.py) and the regex engine, which changes token counts (Len)
on some captions:
* a stray apostrophe inside a word before a final one-letter part: 3.8 splits it off ("there'a" ->
  there ' a), 3.9+ only splits an apostrophe that starts a word;
* 3.9+ turns every whitespace run into one space before the clitic rules, so "'s", "n't", "'ll" and a
  closing "'" followed by a tab or newline are split; 3.8 splits them only before a space (and its
  apostrophe rule leaves "'t" + "is" to the 'tis rule: "'tis" -> 't is, where 3.9+ gives ' tis);
* 3.9+ pads figure/en/em dashes and the horizontal bar (U+2012-U+2015) as tokens; 3.8 leaves them inside;
* 3.9+ Punkt treats the typographic quotes and guillemets as closing punctuation next to a sentence end;
* 3.9+ runs all these expressions with the `regex` engine under a time limit; 3.8 with the stdlib `re`
  (their Unicode classes differ at the edges).
"nltk38" is written here from that understanding: NLTK's Punkt algorithm with 3.8's language
variables and stdlib `re` (`_Punkt38Vars`, `_Punkt38Token`), and our own table of 3.8's Treebank rules
(`_TREEBANK38_*`). Checked against NLTK 3.8.1 and 3.10.4 themselves on constructed captions with quotes and
apostrophes in every position: tests/data/chair_tokenizer/ (expected outputs and the script that made
them), tests/unit/test_chair_tokenize.py.

`word_tokenize(text)` is NLTK's Punkt sentence splitter, then `NLTKWordTokenizer.tokenize` (the
improved Treebank tokenizer, about 80% of the time: some 25 regex substitutions per sentence) on
each sentence. Here Punkt is NLTK's own (`sent_tokenize` for nltk310, NLTK's algorithm with 3.8's
variables for nltk38), and so is the Treebank tokenizer (`treebank38` for nltk38) for every sentence
but the *plain* ones, which are split with `str.replace` and `str.split` instead (the same under both
rule sets: none of the rules that differ can fire on a plain sentence).

A sentence is plain when it is made only of ASCII lowercase letters, digits, the whitespace
characters " \\t\\n\\r\\f\\v", hyphens, commas and periods, with no "--", every comma followed by
whitespace or ending the sentence, at most one period and that one followed by nothing but
whitespace, and none of the substrings cannot, gimme, gonna, gotta, lemme, wanna
(`_PLAIN`, `_CONTRACTION`). Exactness: on a plain sentence the Treebank rules
(nltk/tokenize/destructive.py, nltk pinned in pyproject.toml) do only this:
* the starting/ending quote, clitic, bracket, `[;@#$%&]`, `[?!]`, `*`, dash-range and MacIntyre
  contraction rules need a character or a substring a plain sentence lacks, and `--` is absent;
* `([:,])([^\\d])` and `([:,])$` pad every comma with spaces (each comma is followed by whitespace,
  which is what `([^\\d])` consumes, never the next comma, or ends the sentence);
* the two final-period rules pad the only period, which is the last non-whitespace character
  (their optional closing-bracket/quote part matches nothing but spaces); `\\.{2,}` cannot match;
* `\\s+` -> " " and the padding spaces change no token, and the tokens are `str.split()`'s, whose
  whitespace and the regexes' `\\s` agree on the six whitespace characters allowed.
So the tokens are those of `sentence.replace(",", " , ").replace(".", " . ").split()`. Any other
sentence (an apostrophe, a quote, a mid-sentence period such as "mr." or "3.5", a capital letter,
a non-ASCII or control character, ...) goes to the Treebank rules. Checked against
`nltk.word_tokenize` itself on adversarial and generated text: tests/unit/test_chair_tokenize.py.
"""
from __future__ import annotations

import re

from evalsuite.metrics import nltk_resources as res

TOKENIZERS = ("nltk38", "nltk310")
DEFAULT_TOKENIZER = "nltk38"

_PLAIN = re.compile(r"(?:[a-z0-9 \t\n\r\f\v]|-(?!-)|,(?![^ \t\n\r\f\v]))*(?:\.[ \t\n\r\f\v]*)?")
_CONTRACTION = re.compile(r"cannot|gimme|gonna|gotta|lemme|wanna")


def get_tokenizer(name: str, flag: str = "chair.tokenizer") -> str:
    from evalsuite.errors import UserError

    if name not in TOKENIZERS:
        raise UserError(f"{flag}: unknown CHAIR tokenizer {name!r} (choose from {', '.join(TOKENIZERS)})")
    return name


def plain_tokens(sentence: str) -> list[str] | None:
    """`NLTKWordTokenizer().tokenize(sentence)` for a plain sentence (module docstring), else None.
    The same under both rule sets: none of the rules that differ can fire on a plain sentence."""
    if _PLAIN.fullmatch(sentence) is None or _CONTRACTION.search(sentence) is not None:
        return None
    return sentence.replace(",", " , ").replace(".", " . ").split()


# ---- NLTK <= 3.8's Treebank word rules, applied in this order to one sentence -------------------------

def _pad(chars: str) -> tuple[re.Pattern, str]:
    return re.compile(chars), r" \g<0> "


_TREEBANK38_START = [
    (re.compile("[«“‘„]|`+"), r" \g<0> "),              # opening typographic quotes, runs of backticks
    (re.compile('^"'), "``"),                            # a double quote opening the sentence
    (re.compile("``"), " `` "),
    (re.compile("""([ ([{<])(?:"|'')"""), r"\1 `` "),    # a double quote after a space or bracket opens
    # an apostrophe before one final word character that is no clitic letter (m t s d n) is split off
    # wherever it stands, inside a word too: "there'a" -> "there' a" (3.9+ only at a word's start)
    (re.compile(r"(?i)'(?!re|ve|ll|m|t|s|d|n)(?=\w\b)"), "' "),
]
_TREEBANK38_PUNCT = [
    # the final period, with closing brackets/quotes and spaces after it (possessive: the same
    # matches as the greedy form, in linear time on long space runs)
    (re.compile(r"""([^.])(\.)([\])}>"'»”’ ]*+)\s*$"""), r"\1 \2 \3 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),           # a colon/comma not before a digit
    (re.compile(r"([:,])$"), r" \1 "),
    _pad(r"\.\.+"),                                     # ellipses
    _pad("[;@#$%&]"),
    (re.compile(r"""([^.])(\.)([\])}>"']*)\s*$"""), r"\1 \2\3 "),
    _pad("[?!]"),
    (re.compile("([^'])' "), r"\1 ' "),                  # a closing apostrophe before a space
    _pad(r"\*"),
    _pad(r"[][(){}<>]"),                                  # brackets
    _pad("--"),
]
_TREEBANK38_END = [                                       # on " " + text + " "; no whitespace folding first
    (re.compile("[»”’]"), r" \g<0> "),
    (re.compile("''"), " '' "),
    (re.compile('"'), " '' "),
    (re.compile("([^' ])('[sSmMdD]|') "), r"\1 \2 "),   # 's 'm 'd or a lone ' before a space
    (re.compile("([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
]
_SPLIT_WORDS = [re.compile(p) for p in (   # "cannot" -> can not, ... (the same in every NLTK version)
    r"(?i)\b(can)(not)\b", r"(?i)\b(d)('ye)\b", r"(?i)\b(gim)(me)\b", r"(?i)\b(gon)(na)\b",
    r"(?i)\b(got)(ta)\b", r"(?i)\b(lem)(me)\b", r"(?i)\b(more)('n)\b", r"(?i)\b(wan)(na)(?=\s)",
    r"(?i) ('t)(is)\b", r"(?i) ('t)(was)\b")]


def treebank38(sentence: str) -> list[str]:
    """NLTK <= 3.8's `NLTKWordTokenizer().tokenize(sentence)`."""
    for rx, repl in _TREEBANK38_START + _TREEBANK38_PUNCT:
        sentence = rx.sub(repl, sentence)
    sentence = f" {sentence} "
    for rx, repl in _TREEBANK38_END:
        sentence = rx.sub(repl, sentence)
    for rx in _SPLIT_WORDS:
        sentence = rx.sub(r" \1 \2 ", sentence)
    return sentence.split()


def _punkt38():
    """NLTK's Punkt sentence splitter with the English tables (punkt_tab) and NLTK <= 3.8's language
    variables: only ASCII quotes and brackets close a sentence, and the stdlib `re` engine."""
    from nltk.tokenize.punkt import (
        PunktLanguageVars,
        PunktSentenceTokenizer,
        PunktToken,
        PunktTokenizer,
    )

    class _Punkt38Vars(PunktLanguageVars):
        re_boundary_realignment = re.compile(r"""["')\]}]+?(?:\s+|(?=--)|$)""", re.MULTILINE)

        @property
        def _re_non_word_chars(self):
            return r"""(?:[)";}\]*:@'({\[?!])"""

        def _word_tokenizer_re(self):
            if "_rx_words" not in self.__dict__:
                self._rx_words = re.compile(self._word_tokenize_fmt % {
                    "NonWord": self._re_non_word_chars, "MultiChar": self._re_multi_char_punct,
                    "WordStart": self._re_word_start}, re.UNICODE | re.VERBOSE)
            return self._rx_words

        def period_context_re(self):
            if "_rx_period" not in self.__dict__:
                self._rx_period = re.compile(self._period_context_fmt % {
                    "NonWord": self._re_non_word_chars, "SentEndChars": self._re_sent_end_chars},
                    re.UNICODE | re.VERBOSE)
            return self._rx_period

    class _Punkt38Token(PunktToken):
        __slots__ = ()
        _RE_ELLIPSIS = re.compile(r"\.\.+$")
        _RE_NUMERIC = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
        _RE_INITIAL = re.compile(r"[^\W\d]\.$")
        _RE_ALPHA = re.compile(r"[^\W\d]+$")
        _RE_NON_PUNCT = re.compile(r"[^\W\d]")

        @property
        def is_non_punct(self):
            return self._RE_NON_PUNCT.search(self.type)

    splitter = PunktSentenceTokenizer(lang_vars=_Punkt38Vars(), token_cls=_Punkt38Token)
    splitter._params = PunktTokenizer("english")._params
    return splitter.tokenize


class Tokenizer:
    """`nltk.word_tokenize(text.lower())` with NLTK <= 3.8's rules (`rules="nltk38"`) or the installed
    NLTK's ("nltk310"); the punkt tables are found (or written) while loading."""

    def __init__(self, rules: str = DEFAULT_TOKENIZER) -> None:
        self.rules = get_tokenizer(rules)
        res.find_resource(res.PUNKT)
        if self.rules == "nltk310":
            from nltk.tokenize import NLTKWordTokenizer, sent_tokenize

            self._sentences = sent_tokenize
            self._treebank = NLTKWordTokenizer().tokenize
        else:
            self._sentences = _punkt38()
            self._treebank = treebank38
        self._sentences("")  # loads the Punkt model now, not inside the first caption

    def __call__(self, text: str) -> list[str]:
        out: list[str] = []
        for sentence in self._sentences(text.lower()):
            tokens = plain_tokens(sentence)
            out += tokens if tokens is not None else self._treebank(sentence)
        return out
