"""A word-level tokenizer for synthetic corpora, as a Hugging Face ``PreTrainedTokenizerFast``.

Each whitespace-separated word is one token. The tokenizer is built with the ``tokenizers`` library
(a ``WordLevel`` model and a ``WhitespaceSplit`` pre-tokenizer) and wrapped in
:class:`transformers.PreTrainedTokenizerFast`, so the usual ``tokenizer(texts, padding=True)``,
``decode``, ``save_pretrained`` and ``PreTrainedTokenizerFast.from_pretrained`` all work.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

__all__ = ["word_tokenizer", "SPECIAL_TOKENS"]

#: The special tokens every word tokenizer starts with, in this order (ids 0, 1, 2).
SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>")


def word_tokenizer(words: Iterable[str], padding_side: str = "left") -> PreTrainedTokenizerFast:
    """A tokenizer with ids ``<pad>=0, <unk>=1, <bos>=2`` followed by ``words`` in the order given.

    Parameters
    ----------
    words:
        The vocabulary: distinct strings without whitespace (the special tokens are added in front).
    padding_side:
        ``"left"`` (the default: the last position of every row is then a real token, which is what
        next-token scoring reads) or ``"right"``.
    """
    if isinstance(words, str):
        raise TypeError("words must be an iterable of strings, not a single string")
    words = list(words)
    if not words:
        raise ValueError("words must not be empty")
    for w in words:
        if not isinstance(w, str) or not w or any(c.isspace() for c in w):
            raise ValueError(f"every word must be a non-empty string without whitespace, got {w!r}")
    if len(set(words)) != len(words):
        raise ValueError("words must not repeat")
    if set(words) & set(SPECIAL_TOKENS):
        raise ValueError(f"words must not contain the special tokens {SPECIAL_TOKENS}")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *words))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<bos>", padding_side=padding_side)
