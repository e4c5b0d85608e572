"""Runs the released CSR junk filter on the inputs below and writes released.json (read by
tests/unit/test_csr_clean.py). Not part of the test run: it needs a checkout of the released code.

    python make_reference.py /path/to/YiyangZhou/CSR   # at 353de42

What it runs, unmodified, from that checkout's inference_csr/utils.py: `extract_new_text` (the text a
node's filters and CLIP read) and `clean_tree` (the junk filter: a child it removes is gone with its
subtree), plus the length rule of inference_csr/score.py (`dfs_score` keeps a child only when
len(extract_new_text(child.text, node.text)) >= 4), restated here as one comparison on the released
function's output. The released module's imports that these functions do not use (torch,
transformers, PIL, shortuuid, tqdm) are replaced by empty stand-ins so it loads without them.

Each case is a (parent text, child text) pair: the released filters read the child's text past
len(parent) + 3 characters, stripped and whitelisted; a parent of "" skips the cut (extract_new_text's
`if parent_text:`), so those cases test the rules on the whole sentence.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

# A node text like the released sampler's: the templated prompt, then the response.
P = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
     "detailed, and polite answers to the user's questions. USER: <image>\nDescribe this image. ASSISTANT:")

WHOLE = [  # judged on the whole sentence (parent "")
    # the five sentences of docs/csr-fidelity.md's junk row
    "A radio plays music \u266a in the room.",
    "The sign says Hi \U0001F600 there.",
    "Dog, dog, dog, dog, dog, dog runs.",
    "Apples, pears, , , , and figs.",
    "The sign reads &nbsp; &nbsp; here.",
    # foreign scripts
    "A cat \uace0\uc591\uc774 sits.",              # Hangul syllables
    "He laughs \u314b\u314b here.",                # Hangul compatibility jamo
    "An old \u1100\u1161 sign.",                   # Hangul Jamo (not in the released ranges)
    "It reads \u042d\u0442\u043e here.",           # Cyrillic
    "A \u0500 letter here.",                       # Cyrillic Supplement (not in the released range)
    "A \u306d\u3053 cat.",                         # Hiragana
    "A \u30cd\u30b3 cat.",                         # Katakana
    "A \u31f0 mark here.",                         # Katakana phonetic extensions (not in range)
    "A \u732b cat here.",                          # CJK ideograph (not in range)
    "A coffee \u2615 cup here.",                   # dingbat: whitelisted away
    "Notes \u266b\u266a\u266b here.",              # whitelisted music signs
    "A rocket \U0001F680 flies.",                  # emoji: whitelisted away before the emoji rule
    "An ornament \U0001F650 here.",                # between the released emoji ranges
    # &nbsp;
    "A&nbsp;&nbsp;B here.",
    "A &nbsp;&nbsp;&nbsp; B here.",
    "A&nbsp;-&nbsp;B here.",                       # "-" is whitelisted away: back to back afterwards
    "A &NBSP;&NBSP; B here.",                      # case matters
    "One &nbsp; only here.",
    # word repeats
    "dog dog dog dog dog dog runs.",
    "dog dog dog dog dog runs.",
    "Dog dog dog dog dog dog runs.",
    "the the the the the then it.",               # the last repeat may be a prefix of a longer word
    "cat\ncat\ncat\ncat\ncat\ncat here.",          # newlines are whitespace between repeats
    "go  go\tgo go go go now.",
    "big-big-big-big-big-big dog.",              # "-" goes: one long word
    "a-a-a-a-a-a-a-a-a-a-a here.",                # "-" goes: eleven a's in a row
    "1 1 1 1 1 1 here.",
    # character repeats
    "Wow!!!!!!!!!!! here.",
    "Wow!!!!!!!!!! here.",
    "A line ----------- here.",
    "A b c d e f g h i j k l m here.",
    "Hmm . . . . . . . . . . . here.",
    "A" + " " * 11 + "gap here.",
    "A" + " " * 10 + "gap here.",
    "A" + "\t" * 11 + "tab here.",
    "x\nx\nx\nx\nx\nx\nx\nx\nx\nx\nx",
    "Zzzzzzzzzzz here.",                          # Z then ten z: not one character
    "zzzzzzzzzzz here.",
    # the literals
    "It is ''''''''''' odd.",
    "It is '''''''''' odd.",
    "It is ''''''''' odd.",
    "A , , , , , , , , , , , , , list.",
    "A , , , , , , , , , , list.",
    "tttttttttt here.",
    "sssssssssss here.",
    # newlines
    "a\nb\nc\nd\ne\nf\ng",
    "a\nb\nc\nd\ne\nf",
    "\n\n\nab\ncd\n\n\n",
    # length
    "Ok.",
    "Yes.",
    "Hi \U0001F600",
    "\U0001F600\U0001F600 Hi.",
    "",
    # plain sentences
    "A red circle is on the left.",
    "The man wears a blue shirt, and he holds a cup (of tea).",
]

CUT = [  # the child's text is the parent's + " " + the sentence
    "The cat sits on the mat.",
    "Yes.",
    "A dog.",
    "Ok it is.",
    "It has dog dog dog dog dog dog.",
    "Th\u0435 cat.",                               # a Cyrillic e inside the cut part
    "\u042d cat here.",                           # a Cyrillic letter inside the cut: gone
]


def _stub_imports() -> None:
    for name in ("torch", "torch.utils", "torch.utils.data", "transformers", "PIL", "PIL.Image", "shortuuid",
                 "tqdm"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["transformers"].StoppingCriteria = object
    sys.modules["torch.utils.data"].Dataset = object
    sys.modules["torch.utils.data"].DataLoader = object
    sys.modules["PIL"].Image = sys.modules["PIL.Image"]
    sys.modules["tqdm"].tqdm = lambda x, *a, **k: x


def main(checkout: str) -> None:
    root = Path(checkout)
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    _stub_imports()
    spec = importlib.util.spec_from_file_location("csr_released_utils", root / "inference_csr" / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)

    cases = [("", s) for s in WHOLE] + [(P, P + " " + s) for s in CUT] + [(P + " The cat.", P + " The cat. " + s)
                                                                          for s in CUT]
    out = []
    for parent_text, child_text in cases:
        parent = utils.Node(parent_text, 0.0, 0)
        child = utils.Node(child_text, 0.0, 1, parent)
        parent.add_child(child)
        utils.clean_tree(parent)
        new_text = utils.extract_new_text(child_text, parent_text)
        out.append({"parent": parent_text, "child": child_text, "new_text": new_text,
                    "clean_tree_keeps": parent.children == [child], "long_enough": len(new_text) >= 4})
    doc = {"source": f"YiyangZhou/CSR@{commit}: inference_csr/utils.py clean_tree, extract_new_text; "
                     "inference_csr/score.py dfs_score's length rule (len(new text) >= 4)",
           "python": sys.version.split()[0], "cases": out}
    Path(__file__).with_name("released.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(out)} cases, {sum(not c['clean_tree_keeps'] for c in out)} junk, "
          f"{sum(c['clean_tree_keeps'] and not c['long_enough'] for c in out)} too short")


if __name__ == "__main__":
    main(sys.argv[1])
