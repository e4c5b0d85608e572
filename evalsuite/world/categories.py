"""The world's object categories: 12 real COCO categories, each drawn as one glyph (shape + colour).

Caption words come from the CHAIR vocabulary (Rohrbach et al. 2018, `synonyms.txt`) and were picked so
that BOTH CHAIR normalisers in use map them back to their own category: pattern's `singularize`
(LisaAnne/Hallucination) and NLTK WordNet lemmatisation (OPERA). That is why `bus` is not here
(pattern turns "bus" into "bu", so "a bus" would never count), why person's plural is "people" and not
"men" (the lemmatiser keeps "men", which is no CHAIR word), and why only plurals listed in the CHAIR
golden `singularize/tokens.tsv` are used. Colour and position words are chosen to be no CHAIR word
("orange" is a COCO category, so no glyph is called orange).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Category:
    id: int                   # official COCO category id
    name: str                 # official COCO name
    supercategory: str        # official COCO supercategory
    shape: str                # glyph shape (see evalsuite.world.draw.SHAPES)
    colour: str               # glyph colour name, a key of COLOURS
    words: tuple[str, ...]    # singular caption words (CHAIR synonyms of this category)
    plural: str               # plural caption word (CHAIR maps it back to this category)

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "supercategory": self.supercategory,
                "shape": self.shape, "colour": self.colour, "words": list(self.words),
                "plural": self.plural}


# RGB values far apart from each other and from the mid-grey background.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 160, 40),
    "blue": (30, 60, 220),
    "yellow": (245, 225, 20),
    "purple": (130, 40, 170),
    "pink": (250, 150, 200),
    "brown": (110, 60, 15),
    "black": (10, 10, 10),
    "white": (250, 250, 250),
    "gray": (80, 80, 80),
    "gold": (200, 160, 40),
    "cyan": (20, 225, 235),
}

BACKGROUND = (150, 150, 150)

CATEGORIES: tuple[Category, ...] = (
    Category(1, "person", "person", "vbar", "pink", ("man", "woman", "person"), "people"),
    Category(2, "bicycle", "vehicle", "t_shape", "green", ("bicycle", "bike"), "bicycles"),
    Category(3, "car", "vehicle", "square", "red", ("car",), "cars"),
    Category(8, "truck", "vehicle", "hbar", "blue", ("truck",), "trucks"),
    Category(17, "cat", "animal", "triangle", "yellow", ("cat", "kitten"), "cats"),
    Category(18, "dog", "animal", "circle", "brown", ("dog", "puppy"), "dogs"),
    Category(19, "horse", "animal", "diamond", "purple", ("horse", "pony"), "horses"),
    Category(28, "umbrella", "accessory", "down_triangle", "cyan", ("umbrella",), "umbrellas"),
    Category(44, "bottle", "kitchen", "plus", "white", ("bottle",), "bottles"),
    Category(47, "cup", "kitchen", "hexagon", "black", ("cup",), "cups"),
    Category(62, "chair", "furniture", "cross", "gold", ("chair", "stool"), "chairs"),
    Category(72, "tv", "electronic", "star", "gray", ("tv", "television"), "tvs"),
)

BY_ID: dict[int, Category] = {c.id: c for c in CATEGORIES}

# Co-occurrence pairs (both ways): in the demo's SFT data one object's partner is sometimes mentioned
# although absent, as real captions add a "dining table" next to a "cup" (LURE: co-occurrence and
# late position are what drive object hallucination).
_PAIRS = ((18, 17), (3, 8), (47, 44), (62, 72), (19, 1), (28, 2))
PARTNERS: dict[int, int] = {**{a: b for a, b in _PAIRS}, **{b: a for a, b in _PAIRS}}
BY_NAME: dict[str, Category] = {c.name: c for c in CATEGORIES}

# The 2x2 grid of a world image: cell index -> position words used in captions and questions.
CELLS: tuple[str, ...] = ("top left", "top right", "bottom left", "bottom right")

NUMBER_WORDS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight")

# The official COCO 2014 categories (id, name, supercategory): POPE on real COCO asks about any of them,
# so their names are part of the vocabulary the tiny tokenizer is trained on.
_COCO80 = (
    "1:person:person;2:bicycle:vehicle;3:car:vehicle;4:motorcycle:vehicle;5:airplane:vehicle;"
    "6:bus:vehicle;7:train:vehicle;8:truck:vehicle;9:boat:vehicle;10:traffic light:outdoor;"
    "11:fire hydrant:outdoor;13:stop sign:outdoor;14:parking meter:outdoor;15:bench:outdoor;"
    "16:bird:animal;17:cat:animal;18:dog:animal;19:horse:animal;20:sheep:animal;21:cow:animal;"
    "22:elephant:animal;23:bear:animal;24:zebra:animal;25:giraffe:animal;27:backpack:accessory;"
    "28:umbrella:accessory;31:handbag:accessory;32:tie:accessory;33:suitcase:accessory;"
    "34:frisbee:sports;35:skis:sports;36:snowboard:sports;37:sports ball:sports;38:kite:sports;"
    "39:baseball bat:sports;40:baseball glove:sports;41:skateboard:sports;42:surfboard:sports;"
    "43:tennis racket:sports;44:bottle:kitchen;46:wine glass:kitchen;47:cup:kitchen;"
    "48:fork:kitchen;49:knife:kitchen;50:spoon:kitchen;51:bowl:kitchen;52:banana:food;"
    "53:apple:food;54:sandwich:food;55:orange:food;56:broccoli:food;57:carrot:food;"
    "58:hot dog:food;59:pizza:food;60:donut:food;61:cake:food;62:chair:furniture;"
    "63:couch:furniture;64:potted plant:furniture;65:bed:furniture;67:dining table:furniture;"
    "70:toilet:furniture;72:tv:electronic;73:laptop:electronic;74:mouse:electronic;"
    "75:remote:electronic;76:keyboard:electronic;77:cell phone:electronic;78:microwave:appliance;"
    "79:oven:appliance;80:toaster:appliance;81:sink:appliance;82:refrigerator:appliance;"
    "84:book:indoor;85:clock:indoor;86:vase:indoor;87:scissors:indoor;88:teddy bear:indoor;"
    "89:hair drier:indoor;90:toothbrush:indoor"
)


def _parse_coco80() -> tuple[tuple[int, str, str], ...]:
    rows = (entry.split(":") for entry in _COCO80.split(";"))
    return tuple((int(i), name, sup) for i, name, sup in rows)


COCO80: tuple[tuple[int, str, str], ...] = _parse_coco80()


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"
