r"""The table-top world: procedural scenes with a co-occurrence prior, captions, and exact CHAIR.

A scene is a set of objects placed in the cells of a 4x4 grid. Each object is drawn as a 5x5 glyph
(its own shape) in a colour it shares with its co-occurrence partner, so the image is a
:math:`20\times20\times3` array and the vision model sees 16 patches of :math:`5\times5\times3=75` numbers.

The prior. Four *trigger* objects (fork, cup, dog, bird) each have a *partner* (knife, spoon, frisbee,
bench). When a trigger is in the scene its partner is mentioned in the caption with probability
``p_partner``, and a mentioned partner is *occluded* (named, not drawn) with probability ``p_occluded``,
the analogue of COCO captions naming objects that are barely visible. A model that learns the caption
distribution therefore says "knife" for a fork-only image: a hallucination driven by the language prior.

Captions are bare object words in a fixed canonical order with the partners last,
``describe fork cup clock knife spoon . <eos>``, so the prior must be fetched by attention from an earlier
trigger word. Because the set of drawn objects is known exactly, CHAIR is exact set arithmetic:

.. math::

    \mathrm{CHAIR}_s=\frac{|\{\text{captions with}\ge1\text{ hallucinated object}\}|}{|\{\text{captions}\}|},\qquad
    \mathrm{CHAIR}_i=\frac{|\{\text{hallucinated mentions}\}|}{|\{\text{object mentions}\}|},\qquad
    \text{recall}=\frac{|\{\text{mentioned true objects}\}|}{|\{\text{true objects}\}|}.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "OBJECTS", "PAIRS", "TRIGGERS", "PARTNERS", "CANONICAL_ORDER", "SPECIALS", "VOCAB", "TOKEN_ID",
    "GRID", "CELL", "IMAGE_SIZE", "N_PATCHES", "Scene", "WorldConfig", "object_id", "glyph", "render",
    "sample_scene", "trigger_only_scene", "Split", "make_split", "caption_words", "encode_caption",
    "decode_caption", "sketch_tokens", "chair", "patchify",
]

OBJECTS = ("fork", "knife", "cup", "spoon", "dog", "frisbee", "bird", "bench", "car", "clock")
PAIRS = {"fork": "knife", "cup": "spoon", "dog": "frisbee", "bird": "bench"}
TRIGGERS = tuple(PAIRS)
PARTNERS = tuple(PAIRS.values())
#: Caption order: the six non-partner words first, the four partners last.
CANONICAL_ORDER = ("fork", "cup", "dog", "bird", "car", "clock", "knife", "spoon", "frisbee", "bench")
SPECIALS = ("<pad>", "<bos>", "<eos>", "<blank>", "describe", ".")
VOCAB = SPECIALS + OBJECTS
TOKEN_ID = {w: i for i, w in enumerate(VOCAB)}

GRID = 4          # cells per side
CELL = 5          # pixels per cell side
IMAGE_SIZE = GRID * CELL
N_PATCHES = GRID * GRID

# colour of each object: a pair shares one; car and clock share the fifth
_COLOURS = np.array([[0.9, 0.2, 0.2], [0.2, 0.8, 0.3], [0.25, 0.35, 0.95], [0.9, 0.8, 0.15],
                     [0.75, 0.3, 0.85]])
_COLOUR_OF = {"fork": 0, "knife": 0, "cup": 1, "spoon": 1, "dog": 2, "frisbee": 2, "bird": 3, "bench": 3,
              "car": 4, "clock": 4}
# 5x5 binary glyphs, one per object (rows top to bottom)
_GLYPHS = {
    "fork": ["1.1.1", "1.1.1", "11111", "..1..", "..1.."],
    "knife": ["..1..", "..1..", "..1..", ".111.", "..1.."],
    "cup": ["1...1", "1...1", "1...1", "11111", "....."],
    "spoon": [".111.", ".111.", "..1..", "..1..", "..1.."],
    "dog": ["1...1", "11111", "11111", "1...1", "1...1"],
    "frisbee": [".....", ".111.", "11111", ".111.", "....."],
    "bird": ["1...1", ".1.1.", "..1..", ".....", "....."],
    "bench": ["11111", ".....", "11111", "1...1", "1...1"],
    "car": [".....", ".111.", "11111", "11111", ".1.1."],
    "clock": [".111.", "1.1.1", "1.111", "1...1", ".111."],
}


def object_id(word: str) -> int:
    """Index of an object word in :data:`OBJECTS`; ``ValueError`` naming the word if unknown."""
    if word not in OBJECTS:
        raise ValueError(f"unknown object word {word!r}; the objects are {', '.join(OBJECTS)}")
    return OBJECTS.index(word)


def glyph(word: str) -> np.ndarray:
    """The :math:`5\\times5\\times3` coloured glyph of an object."""
    object_id(word)
    mask = np.array([[c == "1" for c in row] for row in _GLYPHS[word]], dtype=np.float32)
    return mask[:, :, None] * _COLOURS[_COLOUR_OF[word]][None, None, :].astype(np.float32)


# every glyph as a flattened patch, plus a blank row (index len(OBJECTS)) for empty cells
_GLYPH_PATCHES = np.stack([glyph(w).reshape(-1) for w in OBJECTS] + [np.zeros(CELL * CELL * 3, np.float32)])


@dataclass(frozen=True)
class Scene:
    """One scene: ``drawn`` maps cell index (0..15, row-major) to object word; ``mentioned`` is the set of
    objects a training caption names (drawn objects plus occluded partners)."""

    drawn: dict
    mentioned: frozenset

    @property
    def objects(self) -> frozenset:
        """The ground-truth object set: what is visible in the image."""
        return frozenset(self.drawn.values())


@dataclass(frozen=True)
class WorldConfig:
    """The world's statistics.

    ``n_base`` is the range of non-partner objects per scene; ``p_partner`` the chance that a trigger's
    partner is mentioned; ``p_occluded`` the chance that a mentioned partner is not drawn; ``p_lone_partner``
    the chance that one partner is drawn without its trigger (so that partners must be seen, not guessed);
    ``noise`` the pixel noise standard deviation.
    """

    n_base: tuple = (1, 3)
    p_partner: float = 0.85
    p_occluded: float = 0.3
    p_lone_partner: float = 0.15
    noise: float = 0.15

    def __post_init__(self) -> None:
        lo, hi = self.n_base
        if not (1 <= lo <= hi <= 6):
            raise ValueError(f"n_base must satisfy 1 <= lo <= hi <= 6, got {self.n_base}")
        for name in ("p_partner", "p_occluded", "p_lone_partner"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")
        if self.noise < 0:
            raise ValueError(f"noise must be >= 0, got {self.noise}")


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _place(words: list, rng: np.random.Generator) -> dict:
    cells = rng.choice(N_PATCHES, size=len(words), replace=False)
    return {int(c): w for c, w in zip(cells, words)}


def sample_scene(rng: np.random.Generator, config: WorldConfig = WorldConfig(), occlusion: bool = True) -> Scene:
    """Draw one scene from the natural distribution (``occlusion=False`` for test scenes)."""
    _check_rng(rng)
    base_pool = [w for w in CANONICAL_ORDER[:6]]
    k = int(rng.integers(config.n_base[0], config.n_base[1] + 1))
    base = [base_pool[i] for i in rng.choice(len(base_pool), size=k, replace=False)]
    drawn, mentioned = list(base), set(base)
    for trig in base:
        if trig in PAIRS and rng.random() < config.p_partner:
            partner = PAIRS[trig]
            mentioned.add(partner)
            if not (occlusion and rng.random() < config.p_occluded):
                drawn.append(partner)
    if rng.random() < config.p_lone_partner:
        free = [p for p in PARTNERS if p not in mentioned]
        if free:
            p = free[int(rng.integers(len(free)))]
            drawn.append(p)
            mentioned.add(p)
    return Scene(drawn=_place(drawn, rng), mentioned=frozenset(mentioned))


def trigger_only_scene(rng: np.random.Generator) -> Scene:
    """A test scene that stresses the prior: one trigger without its partner, plus 0-1 of car/clock."""
    _check_rng(rng)
    words = [TRIGGERS[int(rng.integers(len(TRIGGERS)))]]
    if rng.random() < 0.5:
        words.append(("car", "clock")[int(rng.integers(2))])
    return Scene(drawn=_place(words, rng), mentioned=frozenset(words))


def render(scene: Scene, rng: np.random.Generator | None = None, noise: float = 0.15) -> np.ndarray:
    """The :math:`20\\times20\\times3` image of a scene, glyphs plus Gaussian pixel noise."""
    img = np.zeros((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.float32)
    for cell, word in scene.drawn.items():
        r, c = divmod(int(cell), GRID)
        img[r * CELL:(r + 1) * CELL, c * CELL:(c + 1) * CELL] = glyph(word)
    if noise > 0:
        if rng is None:
            raise ValueError("rng is required when noise > 0")
        img += _check_rng(rng).normal(0.0, noise, img.shape).astype(np.float32)
    return img


def patchify(images: np.ndarray) -> np.ndarray:
    """Images ``(n, 20, 20, 3)`` to patches ``(n, 16, 75)`` in row-major cell order."""
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE, 3):
        raise ValueError(f"images must have shape (n, {IMAGE_SIZE}, {IMAGE_SIZE}, 3), got {images.shape}")
    n = images.shape[0]
    x = images.reshape(n, GRID, CELL, GRID, CELL, 3).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, N_PATCHES, CELL * CELL * 3)


_OBJECT_SET = frozenset(OBJECTS)


def caption_words(objects) -> list:
    """Object words in canonical order."""
    objs = set(objects)
    if not objs <= _OBJECT_SET:
        for w in objs:
            object_id(w)
    return [w for w in CANONICAL_ORDER if w in objs]


def encode_caption(objects) -> list:
    """Token ids of ``describe w1 w2 ... . <eos>``."""
    return [TOKEN_ID["describe"]] + [TOKEN_ID[w] for w in caption_words(objects)] + [TOKEN_ID["."], TOKEN_ID["<eos>"]]


def decode_caption(ids) -> list:
    """Object words of a generated caption (ids after ``describe``), stopping at ``.``/``<eos>``/``<pad>``."""
    words = []
    for i in ids:
        w = VOCAB[int(i)]
        if w in (".", "<eos>", "<pad>"):
            break
        if w in OBJECTS:
            words.append(w)
    return words


def sketch_tokens(scene: Scene) -> list:
    """The text sketch of a scene: 16 tokens, the object word at its cell and ``<blank>`` elsewhere."""
    out = [TOKEN_ID["<blank>"]] * N_PATCHES
    for cell, w in scene.drawn.items():
        out[int(cell)] = TOKEN_ID[w]
    return out


@dataclass
class Split:
    """A data split: scenes, their images, and the caption objects used as training targets."""

    scenes: list
    images: np.ndarray

    def __len__(self) -> int:
        return len(self.scenes)

    @property
    def truth(self) -> list:
        return [s.objects for s in self.scenes]


def make_split(n: int, rng: np.random.Generator, kind: str = "natural", config: WorldConfig = WorldConfig(),
               occlusion: bool | None = None) -> Split:
    """``n`` scenes of ``kind`` (``"natural"`` or ``"trigger_only"``) with their rendered images.

    ``occlusion`` defaults to True for natural scenes (training data) and is forced off for
    trigger-only scenes. Test splits pass ``occlusion=False``.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    _check_rng(rng)
    if kind == "natural":
        occ = True if occlusion is None else bool(occlusion)
        scenes = [sample_scene(rng, config, occlusion=occ) for _ in range(int(n))]
    elif kind == "trigger_only":
        scenes = [trigger_only_scene(rng) for _ in range(int(n))]
    else:
        raise ValueError(f"kind must be 'natural' or 'trigger_only', got {kind!r}")
    return Split(scenes=scenes, images=_render_all(scenes, rng, config.noise))


def _render_all(scenes: list, rng: np.random.Generator, noise: float, chunk: int = 128) -> np.ndarray:
    """``np.stack([render(s, rng, noise) for s in scenes])`` in whole-array operations on chunks of
    images: the glyphs are gathered as patches, and one normal draw per chunk takes the same numbers from
    ``rng``, in the same order, as one draw per image."""
    n = len(scenes)
    cells = np.full((n, N_PATCHES), len(OBJECTS), dtype=np.intp)   # the blank patch by default
    index = {w: k for k, w in enumerate(OBJECTS)}
    for i, s in enumerate(scenes):
        for cell, word in s.drawn.items():
            cells[i, int(cell)] = index[word]
    img = np.empty((n, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.float32)
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        patches = _GLYPH_PATCHES[cells[a:b]].reshape(b - a, GRID, GRID, CELL, CELL, 3)
        img[a:b] = patches.transpose(0, 1, 3, 2, 4, 5).reshape(b - a, IMAGE_SIZE, IMAGE_SIZE, 3)
        if noise > 0:
            img[a:b] += rng.normal(0.0, noise, (b - a, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
    return img


def chair(captions, truths) -> dict:
    """Exact CHAIR_s, CHAIR_i (in percent) and recall (percent) of object-word captions.

    ``captions`` is a list of lists of object words (each word counted once per caption, as CHAIR does);
    ``truths`` the matching ground-truth object sets.
    """
    captions, truths = list(captions), list(truths)
    if len(captions) != len(truths):
        raise ValueError(f"captions and truths must have the same length, got {len(captions)} and {len(truths)}")
    if not captions:
        raise ValueError("captions must not be empty")
    n_hal_caps = n_mentions = n_hal = n_true = n_hit = 0
    for cap, truth in zip(captions, truths):
        words = set(cap)
        for w in words:
            object_id(w)
        truth = set(truth)
        hal = words - truth
        n_hal_caps += bool(hal)
        n_mentions += len(words)
        n_hal += len(hal)
        n_true += len(truth)
        n_hit += len(words & truth)
    return {
        "chair_s": 100.0 * n_hal_caps / len(captions),
        "chair_i": 100.0 * n_hal / max(n_mentions, 1),
        "recall": 100.0 * n_hit / max(n_true, 1),
        "n": len(captions),
    }
