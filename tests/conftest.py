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
