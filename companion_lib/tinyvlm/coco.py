r"""COCO's object annotations in their real format, and CHAIR on free-text captions (Rohrbach et al., 2018).

CHAIR asks which of COCO's 80 object categories a caption mentions and which of those the image does not
hold. Its two rates, in percent, over captions :math:`c` with mentioned categories :math:`M(c)` and
ground-truth categories :math:`G(c)`:

.. math::

   \mathrm{CHAIR}_i=\frac{\sum_c |M(c)\setminus G(c)|}{\sum_c |M(c)|},\qquad
   \mathrm{CHAIR}_s=\frac{|\{c: M(c)\setminus G(c)\neq\emptyset\}|}{|\{c\}|}.

* :func:`load_coco_objects` -- ground-truth categories per image from ``instances_*.json`` (the
  segmentation annotations) and, when given, from the reference captions of ``captions_*.json``, matched to
  the categories as CHAIR does;
* :func:`load_coco_folder` -- the same from a folder in COCO's own layout (``annotations/``, ``val2014/``);
* :data:`SYNONYMS`, :func:`object_mentions` and :func:`caption_objects` -- the words that name each category (this book's own
  table: COCO's category names with common synonyms; it is *not* the original CHAIR list, so numbers can
  differ a little from published CHAIR values), plurals made by a small rule (nltk's WordNet data is not
  assumed to be installed), two-word names matched before one-word ones ("hot dog" is not a dog);
* :func:`chair` -- per-caption mentions and hallucinations, CHAIR_s, CHAIR_i and recall.

Each category is counted once per caption (the set notation above); the reference script counts a
category again each time it is named.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["COCO_CATEGORIES", "SYNONYMS", "CocoObjects", "load_coco_objects", "load_coco_folder", "object_mentions",
           "caption_objects", "chair", "plural"]

#: COCO's 80 object categories (``categories[*].name`` of ``instances_val2014.json``), in id order.
COCO_CATEGORIES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
    "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
)

#: This book's synonym table: category -> words or phrases (singular; :func:`plural` adds the plurals).
#: Written for this book, not copied from the CHAIR release; ambiguous words (``glass``, ``table`` for
#: furniture in general, ``computer``) are left out rather than guessed.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "person": ("person", "people", "man", "woman", "boy", "girl", "child", "kid", "baby", "toddler", "guy",
               "lady", "gentleman", "adult", "teenager", "player", "skier", "surfer", "skateboarder",
               "snowboarder", "rider", "pedestrian", "passenger", "chef", "worker", "officer",
               "policeman", "soldier", "tourist", "spectator", "crowd", "batter", "catcher", "pitcher",
               "umpire", "bride", "groom", "student", "customer", "biker", "cyclist"),
    "bicycle": ("bicycle", "bike"),
    "car": ("car", "automobile", "sedan", "taxi", "cab", "suv", "jeep", "van"),
    "motorcycle": ("motorcycle", "motorbike", "motor bike", "scooter", "moped", "dirt bike"),
    "airplane": ("airplane", "aeroplane", "plane", "jet", "airliner", "aircraft"),
    "bus": ("bus", "minibus", "trolley"),
    "train": ("train", "locomotive", "tram", "subway"),
    "truck": ("truck", "lorry", "pickup truck", "fire truck", "firetruck"),
    "boat": ("boat", "ship", "sailboat", "kayak", "canoe", "yacht", "ferry", "raft"),
    "traffic light": ("traffic light", "traffic signal", "stoplight", "stop light"),
    "fire hydrant": ("fire hydrant", "hydrant"),
    "stop sign": ("stop sign",),
    "parking meter": ("parking meter",),
    "bench": ("bench",),
    "bird": ("bird", "pigeon", "seagull", "gull", "duck", "goose", "parrot", "sparrow", "owl", "eagle",
             "swan", "chicken", "hen", "crow"),
    "cat": ("cat", "kitten", "kitty"),
    "dog": ("dog", "puppy", "pup", "doggy"),
    "horse": ("horse", "pony", "foal", "stallion", "mare"),
    "sheep": ("sheep", "lamb"),
    "cow": ("cow", "cattle", "calf", "bull", "ox"),
    "elephant": ("elephant",),
    "bear": ("bear", "grizzly", "polar bear"),
    "zebra": ("zebra",),
    "giraffe": ("giraffe",),
    "backpack": ("backpack", "rucksack", "knapsack"),
    "umbrella": ("umbrella", "parasol"),
    "handbag": ("handbag", "purse", "hand bag"),
    "tie": ("tie", "necktie", "bow tie"),
    "suitcase": ("suitcase", "luggage", "suit case"),
    "frisbee": ("frisbee", "flying disc"),
    "skis": ("ski", "skis"),
    "snowboard": ("snowboard",),
    "sports ball": ("sports ball", "ball", "soccer ball", "tennis ball", "football", "basketball",
                    "volleyball"),
    "kite": ("kite",),
    "baseball bat": ("baseball bat", "bat"),
    "baseball glove": ("baseball glove", "glove", "mitt"),
    "skateboard": ("skateboard", "skate board"),
    "surfboard": ("surfboard", "surf board"),
    "tennis racket": ("tennis racket", "racket", "racquet"),
    "bottle": ("bottle",),
    "wine glass": ("wine glass", "wineglass"),
    "cup": ("cup", "mug", "coffee cup", "teacup"),
    "fork": ("fork",),
    "knife": ("knife",),
    "spoon": ("spoon",),
    "bowl": ("bowl",),
    "banana": ("banana",),
    "apple": ("apple",),
    "sandwich": ("sandwich", "burger", "hamburger"),
    "orange": ("orange",),
    "broccoli": ("broccoli",),
    "carrot": ("carrot",),
    "hot dog": ("hot dog", "hotdog"),
    "pizza": ("pizza",),
    "donut": ("donut", "doughnut"),
    "cake": ("cake", "cupcake", "cheesecake"),
    "chair": ("chair", "stool", "armchair"),
    "couch": ("couch", "sofa", "loveseat"),
    "potted plant": ("potted plant", "houseplant", "house plant", "plant pot", "flower pot", "flowerpot"),
    "bed": ("bed",),
    "dining table": ("dining table", "kitchen table", "dinner table", "table"),
    "toilet": ("toilet", "urinal"),
    "tv": ("tv", "television", "tv screen"),
    "laptop": ("laptop", "laptop computer", "notebook computer"),
    "mouse": ("mouse", "computer mouse"),
    "remote": ("remote", "remote control"),
    "keyboard": ("keyboard",),
    "cell phone": ("cell phone", "cellphone", "phone", "smartphone", "mobile phone", "iphone"),
    "microwave": ("microwave",),
    "oven": ("oven", "stove"),
    "toaster": ("toaster",),
    "sink": ("sink",),
    "refrigerator": ("refrigerator", "fridge", "freezer"),
    "book": ("book", "novel", "textbook"),
    "clock": ("clock",),
    "vase": ("vase",),
    "scissors": ("scissors",),
    "teddy bear": ("teddy bear", "teddy", "stuffed bear", "stuffed animal"),
    "hair drier": ("hair drier", "hair dryer", "hairdryer", "blow dryer"),
    "toothbrush": ("toothbrush", "tooth brush"),
}

_IRREGULAR = {"person": "people", "man": "men", "woman": "women", "child": "children", "mouse": "mice",
              "knife": "knives", "sheep": "sheep", "people": "people", "cattle": "cattle", "skis": "skis",
              "scissors": "scissors", "broccoli": "broccoli", "luggage": "luggage", "ox": "oxen",
              "calf": "calves", "goose": "geese", "bus": "buses",
              "policeman": "policemen", "gentleman": "gentlemen"}

#: Words that name a person only when they do not qualify an animal ("baby elephant" is an elephant).
_QUALIFIERS = {"baby", "adult"}
_ANIMALS = {"bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe"}


def plural(word: str) -> str:
    """The plural of a (possibly two-word) name by a small rule: irregular forms, ``-s/-x/-z/-ch/-sh`` ->
    ``-es``, consonant + ``y`` -> ``-ies``, else ``-s``; only the last word of a phrase changes."""
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"word must be a non-empty string, got {word!r}")
    *head, last = word.split()
    if last in _IRREGULAR:
        out = _IRREGULAR[last]
    elif last.endswith(("s", "x", "z", "ch", "sh")):
        out = last + "es"
    elif len(last) > 1 and last.endswith("y") and last[-2] not in "aeiou":
        out = last[:-1] + "ies"
    else:
        out = last + "s"
    return " ".join(head + [out])


def _surface_table(categories: Iterable[str]) -> dict[tuple[str, ...], str]:
    """Token tuples (singular and plural) -> category, for the given categories (a category outside
    :data:`SYNONYMS` is matched by its own name)."""
    table: dict[tuple[str, ...], str] = {}
    for cat in categories:
        for name in SYNONYMS.get(cat, (cat,)):
            for form in (name, plural(name)):
                table.setdefault(tuple(form.split()), cat)
    return table


_DEFAULT_TABLE = _surface_table(COCO_CATEGORIES)


def object_mentions(caption: str, categories: Iterable[str] | None = None) -> list[tuple[str, int, int]]:
    """Every mention of a category in ``caption``, as ``(category, start, end)`` character spans, in order
    (a category named twice appears twice): the words that :func:`caption_objects` counts, located, e.g. to
    find the generated token of each object word.

    Phrases of two words are matched before single words; a person word in ``{"baby", "adult"}`` followed by
    an animal name qualifies the animal and names no person. ``categories`` (default: COCO's 80) limits the
    table, e.g. to the categories of an annotation file."""
    if not isinstance(caption, str):
        raise TypeError(f"caption must be a string, got {type(caption).__name__}")
    table = _DEFAULT_TABLE if categories is None else _surface_table(categories)
    words = [(m.group(), m.start(), m.end()) for m in re.finditer(r"[a-z]+", caption.lower())]
    toks = [w for w, _, _ in words]
    out: list[tuple[str, int, int]] = []
    i = 0
    while i < len(toks):
        two = tuple(toks[i:i + 2]) if i + 1 < len(toks) else None
        if two is not None and two in table:
            cat, step = table[two], 2
        elif (toks[i],) in table:
            cat, step = table[(toks[i],)], 1
            if toks[i] in _QUALIFIERS and i + 1 < len(toks) and table.get((toks[i + 1],)) in _ANIMALS:
                cat = None
        else:
            cat, step = None, 1
        if cat is not None:
            out.append((cat, words[i][1], words[i + step - 1][2]))
        i += step
    return out


def caption_objects(caption: str, categories: Iterable[str] | None = None) -> list[str]:
    """The categories a caption mentions, once each, in the order of their first mention
    (:func:`object_mentions` without repeats)."""
    return list(dict.fromkeys(cat for cat, _, _ in object_mentions(caption, categories)))


@dataclass(frozen=True)
class CocoObjects(Mapping):
    """Ground-truth categories per COCO image: a read-only mapping ``image_id -> frozenset`` of category
    names, with each image's ``file_name``, the file's category names (id order) and the reference captions
    (empty when no captions file was given)."""

    truth: dict = field(repr=False)
    file_names: dict = field(repr=False)
    categories: tuple
    captions: dict = field(repr=False, default_factory=dict)

    def __getitem__(self, image_id: int) -> frozenset:
        return self.truth[image_id]

    def __iter__(self):
        return iter(self.truth)

    def __len__(self) -> int:
        return len(self.truth)

    def image_path(self, image_dir: str | Path, image_id: int) -> Path:
        """The path of an image's file in ``image_dir`` (COCO's ``val2014/`` folder)."""
        return Path(image_dir) / self.file_names[image_id]


def _read_json(path, what: str) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path} (COCO's annotations_trainval2014.zip holds "
                                f"annotations/instances_val2014.json and captions_val2014.json)")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path} must be a JSON object with 'images' and 'annotations', "
                         f"got a {type(data).__name__}")
    return data


def _records(data: dict, key: str, fields: tuple, what: str) -> list:
    recs = data.get(key)
    if not isinstance(recs, list):
        raise ValueError(f"{what} has no list {key!r} (COCO's format: 'images', 'annotations' and, for "
                         f"instances, 'categories'); its keys are {sorted(data)}")
    for r in recs:
        if not isinstance(r, dict) or any(f not in r for f in fields):
            raise ValueError(f"every entry of {what}'s {key!r} needs the fields {list(fields)}, got {r!r}"[:300])
    return recs


def load_coco_objects(instances_json: str | Path, captions_json: str | Path | None = None) -> CocoObjects:
    """Ground-truth objects per image, as CHAIR builds them: the categories of the image's instance
    annotations (``instances_val2014.json``: ``images`` with ``id``/``file_name``, ``annotations`` with
    ``image_id``/``category_id``, ``categories`` with ``id``/``name``) and, when ``captions_json`` is given
    (``captions_val2014.json``: ``annotations`` with ``image_id``/``caption``), the categories its reference
    captions mention (:func:`caption_objects`). Images without annotations have an empty set.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the missing field or id for
    a file in another format."""
    inst = _read_json(instances_json, "instances file")
    images = _records(inst, "images", ("id", "file_name"), "the instances file")
    anns = _records(inst, "annotations", ("image_id", "category_id"), "the instances file")
    cats = _records(inst, "categories", ("id", "name"), "the instances file")
    names = {int(c["id"]): str(c["name"]) for c in cats}
    if not names:
        raise ValueError("the instances file lists no categories")
    truth: dict = {int(im["id"]): set() for im in images}
    files = {int(im["id"]): str(im["file_name"]) for im in images}
    for a in anns:
        iid, cid = int(a["image_id"]), int(a["category_id"])
        if iid not in truth:
            raise ValueError(f"an annotation refers to image {iid}, which the instances file's 'images' lacks")
        if cid not in names:
            raise ValueError(f"an annotation has category_id {cid}, which 'categories' lacks")
        truth[iid].add(names[cid])
    categories = tuple(names[i] for i in sorted(names))
    captions: dict = {}
    if captions_json is not None:
        caps = _read_json(captions_json, "captions file")
        for a in _records(caps, "annotations", ("image_id", "caption"), "the captions file"):
            iid = int(a["image_id"])
            if iid not in truth:
                raise ValueError(f"a caption refers to image {iid}, which the instances file lacks")
            captions.setdefault(iid, []).append(str(a["caption"]))
            truth[iid].update(caption_objects(str(a["caption"]), categories))
    return CocoObjects(truth={k: frozenset(v) for k, v in truth.items()}, file_names=files,
                       categories=categories, captions={k: tuple(v) for k, v in captions.items()})


def chair(captions: Sequence[str] | Mapping, truth: Sequence | Mapping,
          categories: Iterable[str] | None = None) -> dict:
    """CHAIR of free-text ``captions`` against ground-truth categories.

    Either two sequences of the same length (captions as strings; truths as iterables of category names),
    or a mapping ``image_id -> caption`` with a mapping ``image_id -> categories`` (e.g. a
    :class:`CocoObjects`) that holds every id. ``categories`` (default: the :class:`CocoObjects`' own, else
    COCO's 80) is the vocabulary; a ground-truth name outside it is an error.

    Returns ``chair_s``, ``chair_i`` and ``recall`` in percent, ``n`` (captions), ``n_mentions``,
    ``n_hallucinated``, and per caption ``mentions`` and ``hallucinated`` (lists of category names, in order
    of mention) and ``ids`` (the image ids, or positions)."""
    if isinstance(captions, Mapping):
        if not isinstance(truth, Mapping):
            raise TypeError("captions is a mapping image_id -> caption, so truth must be a mapping too "
                            "(e.g. load_coco_objects's result)")
        missing = [i for i in captions if i not in truth]
        if missing:
            raise ValueError(f"truth has no ground truth for image ids {missing[:5]}")
        ids = list(captions)
        caps = [captions[i] for i in ids]
        truths = [truth[i] for i in ids]
    else:
        if isinstance(captions, str):
            raise TypeError("captions must be a list of strings (or a mapping image_id -> caption), not one string")
        caps, truths = list(captions), list(truth)
        if len(caps) != len(truths):
            raise ValueError(f"captions and truth must have the same length, got {len(caps)} and {len(truths)}")
        ids = list(range(len(caps)))
    if not caps:
        raise ValueError("captions must not be empty")
    if categories is None:
        categories = getattr(truth, "categories", None) or COCO_CATEGORIES
    vocab = set(categories)
    mentions, hallucinated = [], []
    n_hal_caps = n_true = n_hit = 0
    for cap, gt in zip(caps, truths):
        if isinstance(gt, str):
            raise TypeError(f"each ground truth must be a set of category names, got the string {gt!r}")
        gt = set(gt)
        unknown = gt - vocab
        if unknown:
            raise ValueError(f"ground-truth names {sorted(unknown)} are not categories of the vocabulary "
                             f"(COCO's 80 names such as 'person', 'dining table')")
        found = caption_objects(cap, categories)
        hal = [c for c in found if c not in gt]
        mentions.append(found)
        hallucinated.append(hal)
        n_hal_caps += bool(hal)
        n_true += len(gt)
        n_hit += len(gt.intersection(found))
    n_mentions = sum(map(len, mentions))
    n_hal = sum(map(len, hallucinated))
    return {"chair_s": 100.0 * n_hal_caps / len(caps), "chair_i": 100.0 * n_hal / max(n_mentions, 1),
            "recall": 100.0 * n_hit / max(n_true, 1), "n": len(caps), "n_mentions": n_mentions,
            "n_hallucinated": n_hal, "mentions": mentions, "hallucinated": hallucinated, "ids": ids}


def load_coco_folder(data: str | Path, split: str = "val2014") -> tuple[CocoObjects, Path]:
    """COCO in its real layout under the folder ``data``: ``annotations/instances_<split>.json`` (and
    ``annotations/captions_<split>.json`` when present, which CHAIR adds to the ground truth) and the images in
    ``<split>/``. Returns ``(objects, image_dir)`` (:func:`load_coco_objects`);
    errors name the missing file and the layout expected (COCO's ``annotations_trainval2014.zip`` and
    ``val2014.zip``, unpacked side by side)."""
    if data is None or not isinstance(data, (str, Path)):
        raise TypeError(f"data must be the folder of COCO 2014 (annotations/ and {split}/), got {data!r}")
    root = Path(data)
    layout = (f"expected COCO's layout: {root}/annotations/instances_{split}.json (from "
              f"annotations_trainval2014.zip), optionally annotations/captions_{split}.json, and the images in "
              f"{root}/{split}/")
    inst = root / "annotations" / f"instances_{split}.json"
    if not inst.is_file():
        raise FileNotFoundError(f"no {inst}: {layout}")
    if not (root / split).is_dir():
        raise FileNotFoundError(f"no image folder {root / split}: {layout}")
    caps = root / "annotations" / f"captions_{split}.json"
    return load_coco_objects(inst, caps if caps.is_file() else None), root / split
