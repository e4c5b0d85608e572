"""The CHAIR fast paths against NLTK / the plain loops they replace, on every golden caption and on
generated texts built to reach each branch (abbreviations, initials, numbers, collocations,
contractions, clitics, odd whitespace, hyphens)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[2].parent / "shared" / "golden"


@pytest.fixture(scope="module")
def punkt(tmp_path_factory):
    from evalsuite.metrics import nltk_resources, nltk_setup

    if not (GOLDEN / "nltk_data").is_dir():
        pytest.skip(f"{GOLDEN / 'nltk_data'} not present")
    out = tmp_path_factory.mktemp("nltk_punkt")
    nltk_setup.copy_models(out, GOLDEN / "nltk_data")
    nltk_resources.add_data_dir(out)
    return out


def _golden_texts() -> list[str]:
    base = GOLDEN / "chair"
    if not base.is_dir():
        pytest.skip(f"{base} not present")
    texts = [json.loads(line)["caption"] for p in sorted((base / "captions").rglob("*.jsonl"))
             for line in p.read_text().splitlines() if line.strip()]
    texts += [a["caption"] for a in json.loads((base / "coco_val2014_80/captions.json").read_text())["annotations"]]
    return texts


# Words chosen to hit Punkt's exceptions: abbreviations (mr, st, dr, etc, vs, inc), initials (a, e),
# numbers (3, 4-5), collocation starters, MacIntyre contractions, "'s" clitics, hyphen forms.
WORDS = ["dog", "the", "mr", "st", "dr", "etc", "vs", "inc", "a", "e", "u", "3", "4-5", "2-d", "t-shirt",
         "cannot", "gonna", "wanna", "man's", "it's", "its", "x-ray", "co", "jan", "no", "ok", "sept",
         "ft", "oz", "fig", "lbs", "mt", "ave", "approx", "i", "ii", "iv", "de", "van", "jr", "sr",
         "-", "--", "'s", "'", "b.c", "u.s", "1.5"]
SEPS = [" ", " ", " ", "  ", "\n", "\n\n", "\t", " \n ", "\r", "\x0c", "\x1c", "\xa0"]
ENDS = ["", "", "", ",", ".", ".", "?", "!", ".,", ";", ")", "\""]


def _generated(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        parts = [rng.choice(WORDS) + rng.choice(ENDS) + rng.choice(SEPS) for _ in range(k)]
        text = "".join(parts)
        if rng.random() < 0.5:
            text = text.strip()
        out.append(text.upper() if rng.random() < 0.1 else text)
    return out


def test_fast_tokenizer_equals_word_tokenize_on_golden_captions(punkt):
    """Every golden LLaVA/example caption and every COCO reference caption, twice (fresh, memoised)."""
    from nltk import word_tokenize

    from evalsuite.metrics.chair_tokenize import FastTokenizer

    texts = _golden_texts()
    tok = FastTokenizer()
    for _ in range(2):
        assert [t for t in texts if tok(t) != word_tokenize(t.lower())] == []
    # the fast path carries the load: at most 3% of the LLaVA captions need NLTK
    assert sum(tok._fast(t.lower()) is None for t in texts[:1500]) <= 45


def test_fast_tokenizer_equals_word_tokenize_on_generated_texts(punkt):
    """4,000 texts mixing Punkt's exceptions; both the fast and the slow path are exercised."""
    from nltk import word_tokenize

    from evalsuite.metrics.chair_tokenize import FastTokenizer

    tok = FastTokenizer()
    texts = _generated(4000)
    assert [t for t in texts if tok(t) != word_tokenize(t.lower())] == []
    fast = sum(tok._fast(t.lower()) is not None for t in texts)
    assert 150 < fast < len(texts)  # 197 of them with seed 0


def test_plain_break_words_are_one_punkt_token(punkt):
    """The fast path's premise: Punkt reads "W." before whitespace as a single token."""
    from evalsuite.metrics.chair_tokenize import _CHUNK, FastTokenizer

    tok = FastTokenizer()
    words = {w.rstrip(".,") for t in _golden_texts() for w in t.lower().split()} | set(WORDS)
    words = [w for w in words if w and _CHUNK.fullmatch(w) and "'" not in w]
    wt = tok.slow._punkt._lang_vars.word_tokenize
    assert [w for w in words if wt(w + ". x")[:1] != [w + "."] or wt(w + ".") != [w + "."]] == []
    assert tok._is_plain_break("dog") and not tok._is_plain_break("mr") and not tok._is_plain_break("3")
    assert not tok._is_plain_break("e")  # an initial


def test_singularize_tables_equal_plain_loops():
    """The suffix-set / literal-ending shortcuts equal textblob-table loops on generated words."""
    from textblob.en import inflect as tb

    from evalsuite.metrics.chair_normalize import _pattern_tables, _singularize

    t = _pattern_tables()
    rng = random.Random(1)
    stems = ["dog", "bus", "matr", "analy", "ox", "kni", "hal", "wol", "lea", "sheep", "dogg", "cookie"]
    ends = ["", "s", "es", "ies", "ves", "ices", "ses", "en", "ae", "i", "a", "ice", "oses", "eaux", "'"]
    words = {rng.choice(stems) + rng.choice(ends) for _ in range(3000)}
    words |= {w.upper() for w in list(words)[:300]} | {"", "s", "S", "oxenford", "a\nb", "sſ"}
    for word in sorted(words):
        lower = word.lower()
        rule = next(((r, inf) for r, inf in tb.singular_rules if r.search(word)), None)
        kept = any(w.endswith(lower) for w in t["kept"])
        if kept or "-" in word or word.endswith("'") or lower.endswith(t["ie"] + t["s"] + t["irregular_ends"]):
            continue  # those branches come before the rules; the golden tokens.tsv covers them
        if rule is None:
            assert _singularize(word) == word, word
        elif "\\" not in rule[1]:
            assert _singularize(word) == rule[0].sub(rule[1], word), word


def test_merge_and_mentions_equal_the_plain_scan():
    """Index-scan merge/mention search equals the textbook left-to-right loop on random token lists."""
    from evalsuite.metrics import chair
    from evalsuite.metrics.chair_vocab import load_vocab

    v = load_vocab()
    pool = sorted(v.pair_firsts) + ["teddy", "bear", "hot", "dog", "toilet", "seat", "a", "the", "people",
                                    "dining", "table", "stop", "sign", "cell", "phone"]
    rng = random.Random(2)

    def plain_merge(tokens):
        out, i = [], 0
        while i < len(tokens):
            m = v.pairs.get(" ".join(tokens[i:i + 2])) if i + 1 < len(tokens) else None
            out.append(m if m is not None else tokens[i])
            i += 2 if m is not None else 1
        return out

    def plain_mentions(merged):
        present = set(merged)
        dropped = {w for needed, w in v.remove_if_all if needed <= present}
        return [(w, v.word_to_category[w], i) for i, w in enumerate(merged)
                if w in v.word_to_category and w not in dropped]

    for _ in range(3000):
        tokens = [rng.choice(pool) for _ in range(rng.randint(0, 20))]
        merged = chair.merge_pairs(tokens, v)
        assert merged == plain_merge(tokens), tokens
        assert chair.find_mentions(merged, v) == plain_mentions(merged), tokens


def _punkt_plain_break(tok, word: str) -> bool:
    """The reference: Punkt's own first-pass annotation of the token "W." (the old code path)."""
    punkt = tok.slow._punkt
    (aug,) = punkt._annotate_first_pass([punkt._Token(word + ".")])
    typ = aug.type_no_period
    return bool(aug.sentbreak and not aug.abbr and not aug.ellipsis and not aug.is_initial
                and typ != "##number##" and typ not in tok._colloc_firsts)


def test_plain_break_table_lookup_equals_punkt_annotation(punkt):
    """`_is_plain_break` (table lookups) equals Punkt's annotation on every golden word, every
    abbreviation and collocation first (alone, hyphen-suffixed, with "'s"), and generated words."""
    from evalsuite.metrics.chair_tokenize import _CHUNK, FastTokenizer

    tok = FastTokenizer()
    rng = random.Random(3)
    words = {w.rstrip(".,") for t in _golden_texts() for w in t.lower().split()} | set(WORDS)
    special = set(tok._abbrev) | set(tok._colloc_firsts)
    words |= special | {"x-" + w for w in special} | {w + "-x" for w in special} | {w + "'s" for w in special}
    alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
    words |= {"-".join("".join(rng.choice(alnum) for _ in range(rng.randint(1, 3)))
                       for _ in range(rng.randint(1, 3))) for _ in range(3000)}
    words = sorted(w for w in words if w and _CHUNK.fullmatch(w) and _CHUNK.fullmatch(w).group(2) == "")
    assert len(words) > 5000
    assert [w for w in words if tok._is_plain_break(w) != _punkt_plain_break(tok, w)] == []


def test_bulk_chunk_check_equals_per_chunk_check(punkt):
    """`_all_plain(set)` (one regex over the joined set) equals checking each chunk on its own."""
    from evalsuite.metrics.chair_tokenize import FastTokenizer

    tok = FastTokenizer()
    rng = random.Random(4)
    pool = [w + e for w in WORDS for e in ENDS] + ["a--b", "-a", "a-", "a'b", "x''s", "gonna,", "b.c."]
    for _ in range(3000):
        chunks = {rng.choice(pool) for _ in range(rng.randint(1, 6))} - {""}
        chunks = {c for c in chunks if not any(ch.isspace() for ch in c)}
        if chunks:
            assert tok._all_plain(chunks) == all(tok._plain_chunk(c, False) for c in chunks), chunks


def _layout_texts(n: int, seed: int) -> list[str]:
    """Texts of the plain character set glued at random, to reach each layout rule of `_plain_layout`."""
    rng = random.Random(seed)
    pieces = ["dog", "s", "'s", "'", ",", ".", "-", "3", " ", " ", "\n", "\t", "mr", "e", "cannot", "etc", "'s's"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 10))) for _ in range(n)]


def test_token_validator_equals_chunk_validation(punkt):
    """`TokenValidator` (byte checks + per-token check on `_chunk_tokens`) accepts exactly the texts
    whose chunks are each plain in their position (`FastTokenizer._plain_chunk`, no memo), with
    `word_tokenize`'s tokens, on every golden text and generated ones (Punkt exceptions, odd layouts
    of "," "." "'" "-" and whitespace)."""
    from nltk import word_tokenize

    from evalsuite.metrics.chair_tokenize import FastTokenizer, TokenValidator

    def chunks_plain(low):
        chunks = tok._allowed_chunks(low)
        return chunks is not None and all(tok._plain_chunk(c, i == len(chunks) - 1) for i, c in enumerate(chunks))

    texts = _golden_texts() + _generated(4000, seed=6) + _layout_texts(20000, seed=7)
    texts += ["dogs etc.", "dogs etc. cats.", "etc. dogs", "mr. dogs", "a man's dog. x", "a man's. x", "x's's",
              "A \u212a dog.", "A DOG. Two Cats, A Man's Hat."]  # Kelvin sign: lowercases to ASCII "k"
    tok = FastTokenizer()
    v = TokenValidator(tok)
    accepted = 0
    for text in texts:
        low = text.lower()
        tokens = v.layout_tokens(text)
        if tokens is not None and not v.words_plain(set(tokens)):
            tokens = None
        assert (tokens is not None) == (chunks_plain(low) and text.isascii()), text
        if tokens is not None:
            accepted += 1
            assert [t.decode() for t in tokens] == word_tokenize(low), text
    assert accepted > 3000


def test_pattern_mentions_equal_the_staged_pipeline(punkt):
    """`PatternMentions` (raw tokens, per-token memos, sparse merge) equals normalize -> merge_pairs
    -> find_mentions on `word_tokenize`, fresh and memoised, on golden and generated texts (the
    generated ones mostly take NLTK's path)."""
    from nltk import word_tokenize

    from evalsuite.metrics import chair

    sc = chair.ChairScorer("original")
    assert sc._sparse is not None
    texts = _golden_texts() + _generated(3000, seed=8) + ["two dogs, mr.", "A toilet seat. The seat.", '"hot dog".',
                                                            "A \u212a dog."]
    for _ in range(2):
        for text in texts:
            merged = chair.merge_pairs(sc.normalize(word_tokenize(text.lower())), sc.vocab)
            assert sc.mentions(text) == (chair.find_mentions(merged, sc.vocab), len(merged)), text


def test_singularize_ending_gates_are_necessary():
    """`_singularize` tries the -ie / s-singular / irregular endings only when the word's last two
    letters end one of them, and the rules of `_ascii_candidates` only: both drop nothing that can match."""
    from evalsuite.metrics.chair_normalize import _ascii_candidates, _pattern_tables

    t = _pattern_tables()
    by_last = t["rules_by_last"]
    ends = set(t["ie"]) | set(t["s"]) | set(t["irregular_ends"]) | {c[2] for b in by_last.values() for c in b}
    ends |= {e[i:] for e in list(ends) for i in range(len(e))}
    rng = random.Random(9)
    words = {p + e for e in ends for p in ["", "a", "x", "qu", "ox", "sh", "the"]}
    words |= {"".join(rng.choice("abcdefghijklmnopqrstuvwxyz'-0") for _ in range(rng.randint(0, 6))) for _ in range(5000)}
    for lower in sorted(words):
        for key, table in (("ie", "ie_tails"), ("s", "s_tails"), ("irregular_ends", "irregular_tails")):
            if lower.endswith(t[key]):
                assert lower[-2:] in t[table], (lower, key)
        bucket = by_last.get(lower[-1:], by_last[""])
        assert [c for c in bucket if lower.endswith(c[2])] == [c for c in _ascii_candidates(t, lower)
                                                              if lower.endswith(c[2])], lower
