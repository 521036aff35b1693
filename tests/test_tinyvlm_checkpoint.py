"""The shipped default worlds (companion_lib.tinyvlm.checkpoint): the file format, the lookup, and the
regeneration check: each shipped world is re-trained from scratch here and compared with its checkpoint."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import asdict

import numpy as np
import pytest
import torch

from companion_lib import tinyvlm as tv
from companion_lib.tinyvlm import checkpoint as ck
from tests.test_tinyvlm import TINY


@pytest.fixture(scope="module")
def tiny_world():
    return tv.train_world(7, TINY)


def test_save_load_roundtrip_is_exact_and_bytes_are_reproducible(tiny_world, tmp_path):
    a = ck.save_world(tiny_world, tmp_path / "a.npz")
    b = ck.save_world(tiny_world, tmp_path / "b.npz")
    assert a.read_bytes() == b.read_bytes()          # no timestamps: regenerating an equal world changes no byte
    world, meta = ck.load_world(a)
    assert ck.world_differences(world, tiny_world) == []
    assert list(world.final_state) == list(tiny_world.final_state)     # state_dict order kept
    assert world.world_config == asdict(tv.WorldConfig()) and isinstance(world.world_config["n_base"], tuple)
    assert meta["seed"] == 7 and meta["numerics"] == ck.numerics_signature()
    # the post-alignment LM is the base LM: only the encoder and projector are stored for it
    with np.load(a) as data:
        stored = [n for n in data.files if n.startswith("aligned_state/")]
    assert stored and all(not n.startswith("aligned_state/lm.") for n in stored)
    model = tv.build_model(world.final_state, world.config)
    assert isinstance(model, tv.TinyVLM)


def test_world_differences_and_loss_agreement(tiny_world):
    other = dataclasses.replace(tiny_world, final_state={k: v.clone() for k, v in tiny_world.final_state.items()},
                                losses={k: list(v) for k, v in tiny_world.losses.items()})
    assert ck.world_differences(other, tiny_world) == []
    key = next(iter(other.final_state))
    other.final_state[key].view(-1)[0] += 1e-3
    assert ck.world_differences(other, tiny_world) == [f"final_state[{key}]"]
    assert all(ck.loss_agreement(other, tiny_world).values())
    other.losses["text"][0] *= 1 + 1e-3                # a first loss that differs: another recipe or data
    other.losses["tune"] = [2 * x for x in other.losses["tune"]]
    agreement = ck.loss_agreement(other, tiny_world)
    assert not agreement["early"] and not agreement["tune"] and agreement["align"]
    assert "losses" in ck.world_differences(other, tiny_world)
    with pytest.raises(ValueError, match="stages"):
        ck.loss_agreement(dataclasses.replace(other, losses={"text": other.losses["text"]}), tiny_world)


def test_shipped_lookup_matches_seed_and_settings(tiny_world, tmp_path):
    ck.save_world(tiny_world, ck.checkpoint_path(7, tmp_path))
    found = ck.shipped_world(7, TINY, folder=tmp_path)
    assert found is not None and ck.world_differences(found, tiny_world) == []
    assert ck.shipped_world(7, tv.TrainConfig(), folder=tmp_path) is None           # other settings: train
    assert ck.shipped_world(7, TINY, tv.WorldConfig(noise=0.1), folder=tmp_path) is None
    assert ck.shipped_world(8, TINY, folder=tmp_path) is None                      # no file


def test_trained_world_serves_the_shipped_default_worlds(monkeypatch, tmp_path):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    for seed in ck.SHIPPED_SEEDS:
        world = tv.trained_world(seed)
        shipped, meta = ck.load_world(ck.checkpoint_path(seed))
        assert ck.world_differences(world, shipped) == []
        assert meta["config"] == asdict(tv.TrainConfig()) and world.config == asdict(tv.TrainConfig())
        assert world.probe_drift.shape == (len(world.probe_steps), 4, 8) and np.all(world.probe_drift[0] == 0)
    assert not any(tmp_path.rglob("output.pkl"))     # loaded, not trained through the disk cache


def test_checkpoint_bad_input(tiny_world, tmp_path):
    with pytest.raises(ValueError, match="seed"):
        ck.checkpoint_path(-1)
    with pytest.raises(ValueError, match="seed"):
        tv.trained_world(-2)
    with pytest.raises(TypeError, match="World"):
        ck.save_world({"seed": 0}, tmp_path / "w.npz")
    with pytest.raises(ValueError, match=".npz"):
        ck.save_world(tiny_world, tmp_path / "w.pt")
    with pytest.raises(FileNotFoundError, match="no world checkpoint"):
        ck.load_world(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="not a world checkpoint"):
        ck.load_world(tmp_path / "other.npz")


def test_numerics_signature_names_what_decides_rounding():
    sig = ck.numerics_signature()
    assert {"torch", "transformers", "numpy", "cpu_capability", "blas", "machine", "cpu"} <= set(sig)
    assert sig["torch"] == torch.__version__ and sig == ck.numerics_signature()


# -- regeneration: each shipped world re-trained from scratch (about a minute each; one class per seed, so
# that pytest-xdist's loadscope runs them on different workers) ------------------------------------------
def _regenerates(seed: int) -> None:
    result = ck.check_regenerated(seed)
    if result["exact"]:
        assert result["differences"] == [], (
            f"seed {seed}: the shipped world differs from what train_world returns now "
            f"({result['differences'][:5]}...): run `make worlds` and commit the checkpoints")
    else:
        warnings.warn(f"seed {seed}: this machine's numerics {result['numerics']} differ from the checkpoints' "
                      f"{result['shipped_numerics']}; compared the losses only: {result['agreement']}")
        assert all(result["agreement"].values()), result["agreement"]
    assert result["ok"]


class TestShippedWorld0:
    def test_regenerates(self):
        _regenerates(0)


class TestShippedWorld1:
    def test_regenerates(self):
        _regenerates(1)


class TestShippedWorld2:
    def test_regenerates(self):
        _regenerates(2)


class TestShippedWorld3:
    def test_regenerates(self):
        _regenerates(3)


class TestShippedWorld4:
    def test_regenerates(self):
        _regenerates(4)


def test_every_shipped_seed_has_a_regeneration_test():
    tested = {int(name.removeprefix("TestShippedWorld")) for name in globals() if name.startswith("TestShippedWorld")}
    assert tested == set(ck.SHIPPED_SEEDS)
    assert sorted(p.name for p in ck.CHECKPOINT_DIR.glob("*.npz")) == [f"world_seed{s}.npz" for s in ck.SHIPPED_SEEDS]
