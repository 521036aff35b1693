"""Unit tests run with one BLAS/torch thread, like the notebooks: on 2 cores, with two pytest
workers, the default thread pools oversubscribe the machine and small solves slow down 10-100x.

Fixtures shared by several test files live here (test modules never import each other)."""

import pytest

from companion_lib.common import limit_threads


def pytest_configure(config):
    limit_threads()


@pytest.fixture(scope="session")
def tiny_train_config():
    """A tiny-VLM training recipe of a few steps (companion_lib.tinyvlm), for tests that train worlds."""
    from companion_lib import tinyvlm as tv

    return tv.TrainConfig(n_text=200, n_image=100, text_steps=3, align_steps=2, tune_steps=3, batch_size=8,
                          probe_every=2, n_probe=4)


#: the real checkpoint classes of the papers' language models (issue 39), by short name
REAL_LM_CLASSES = ("gpt2", "neox", "olmo", "olmo2", "llama")


def save_tiny_real_lm(folder, arch: str, words, seed: int = 0, n_layer: int = 2, hidden: int = 16,
                      n_head: int = 2, max_positions: int = 256):
    """Save a tiny randomly initialised checkpoint of a real class (``arch`` in :data:`REAL_LM_CLASSES`) with a
    word-level tokenizer over ``words`` to ``folder`` (``save_pretrained``), so a test can pass the folder
    wherever a reader would pass a hub id. No download: the model is built from its own config."""
    from pathlib import Path

    import torch
    import transformers as tf

    from companion_lib.tinylm import word_tokenizer

    words = list(dict.fromkeys(words))
    tok = word_tokenizer(words)
    vocab = len(words) + 3
    common = dict(vocab_size=vocab, pad_token_id=0, bos_token_id=2, eos_token_id=2)
    if arch == "gpt2":
        config = tf.GPT2Config(n_embd=hidden, n_layer=n_layer, n_head=n_head, n_positions=max_positions, **common)
        cls = tf.GPT2LMHeadModel
    else:
        config_cls, cls = {"neox": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM), "olmo": (tf.OlmoConfig, tf.OlmoForCausalLM),
                           "olmo2": (tf.Olmo2Config, tf.Olmo2ForCausalLM),
                           "llama": (tf.LlamaConfig, tf.LlamaForCausalLM)}[arch]
        config = config_cls(hidden_size=hidden, num_hidden_layers=n_layer, num_attention_heads=n_head,
                            intermediate_size=2 * hidden, max_position_embeddings=max_positions, **common)
    config.architectures = [cls.__name__]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config).eval()
    folder = Path(folder)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def tiny_real_lm(tmp_path):
    """``make(arch, words, **kw) -> folder``: a tiny real-class checkpoint saved under this test's tmp_path
    (see :func:`save_tiny_real_lm`)."""
    count = iter(range(10**6))

    def make(arch: str, words, **kw):
        return save_tiny_real_lm(tmp_path / f"{arch}-{next(count)}", arch, words, **kw)

    return make


@pytest.fixture
def run_reproduce(tmp_path, monkeypatch):
    """``run(md, parameters, tag) -> (executed notebook, claims JSON, error)``: execute a reproduce page with
    parameters (bookkit.reseed.run_with_parameters) in a fresh kernel, with an empty disk cache and a claims
    folder of its own (the book's caches and claims are left alone). ``checks_off_before="At full scale"``: the
    page's own checks (claims, prose assertions) before that section may fail at the test's toy sizes without
    failing the run; any other error, and any error in the section, does."""
    from bookkit.reseed import run_with_parameters

    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BOOK_CLAIMS_DIR", str(tmp_path / "claims"))

    def run(md, parameters: dict, tag: str = "params", timeout: int = 600, checks_off_before: str | None = None):
        return run_with_parameters(md, parameters, tmp_path / "executed", tag, timeout=timeout,
                                   checks_off_before=checks_off_before)

    return run


def save_tiny_llava(folder, words, seed: int = 0, image_size: int = 8, patch_size: int = 4):
    """Save a tiny randomly initialised ``LlavaForConditionalGeneration`` (CLIP vision tower, Llama text model;
    :func:`companion_lib.tinyvlm.tiny_llava_config`) with a ``LlavaProcessor`` made locally (a CLIP image
    processor at ``image_size`` px and a word-level tokenizer over ``words`` plus the special token
    ``<image>``) to ``folder``; ``(image_size // patch_size) ** 2`` image tokens per image. No download."""
    from pathlib import Path

    import torch
    import transformers as tf

    from companion_lib.tinylm import word_tokenizer
    from companion_lib.tinyvlm import tiny_llava_config

    tok = word_tokenizer([w for w in dict.fromkeys(words) if w != "<image>"])
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    config = tiny_llava_config(vocab_size=len(tok), image_size=image_size, patch_size=patch_size)
    assert config.image_token_id == tok.convert_tokens_to_ids("<image>")
    config.architectures = ["LlavaForConditionalGeneration"]
    image_cls = getattr(tf, "CLIPImageProcessorPil", tf.CLIPImageProcessor)   # no torchvision in the book's env
    images = image_cls(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size})
    processor = tf.LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=patch_size,
                                  vision_feature_select_strategy="default", image_token="<image>",
                                  num_additional_image_tokens=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = tf.LlavaForConditionalGeneration(config).eval()
    folder = Path(folder)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture
def tiny_llava(tmp_path):
    """``make(words, **kw) -> folder``: a tiny LLaVA checkpoint with its processor saved under this test's
    tmp_path (see :func:`save_tiny_llava`)."""
    count = iter(range(10**6))

    def make(words, **kw):
        return save_tiny_llava(tmp_path / f"llava-{next(count)}", words, **kw)

    return make
