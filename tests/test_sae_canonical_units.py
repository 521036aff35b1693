"""Tests of companion_lib.sae_canonical_units (chapter 13: SAEs do not find canonical units).

The TopK/BatchTopK forward pass and reconstruction loss are cross-checked against sae-lens 6.54
(``TopKTrainingSAE``, ``BatchTopKTrainingSAE``) on the same weights and data; sae-lens is imported only
here, never at run time.
"""

import numpy as np
import pytest
import torch

from companion_lib import sae_canonical_units as S
from companion_lib.sae_canonical_units import stitching


@pytest.fixture(scope="module")
def world_and_data():
    rng = np.random.default_rng(0)
    world = S.make_world(rng)
    return world, S.sample_activations(world, 6000, rng), S.sample_activations(world, 1000, rng)


def test_world_structure():
    rng = np.random.default_rng(1)
    w = S.make_world(rng, d=16, n_atoms=6, n_entities=10, atoms_per_entity=2, specific_weight=0.0)
    assert w.atoms.shape == (6, 16) and w.entities.shape == (10, 16) and w.entity_atoms.shape == (10, 2)
    assert np.allclose(np.linalg.norm(w.entities, axis=1), 1)
    # with no specific direction, an entity is the normalised sum of its atoms
    e = w.atoms[w.entity_atoms[0]].sum(0)
    assert np.allclose(w.entities[0], e / np.linalg.norm(e))
    X = S.sample_activations(w, 50, rng)
    assert X.shape == (50, 16) and X.dtype == np.float32


def test_topk_and_batch_topk_counts():
    z = torch.randn(7, 12) + 0.5
    f = S.topk_per_sample(z, 3)
    assert ((f > 0).sum(1) <= 3).all() and (f >= 0).all()
    g = S.batch_topk(z, 3)
    assert int((g > 0).sum()) <= 21
    # batch top-k keeps exactly the 21 largest positive entries of the batch
    kept = torch.sort(torch.relu(z).flatten(), descending=True).values[:21]
    assert torch.allclose(torch.sort(g[g > 0], descending=True).values, kept[kept > 0])


def test_topk_is_batch_invariant_but_batch_topk_is_not():
    torch.manual_seed(0)
    z = torch.randn(8, 10)
    assert torch.equal(S.topk_per_sample(z, 2)[:4], S.topk_per_sample(z[:4], 2))
    z2 = z.clone(); z2[4:] += 3.0        # make the rest of the batch stronger
    assert not torch.equal(S.batch_topk(z2, 2)[:4], S.batch_topk(z2[:4], 2))


@pytest.mark.parametrize("kind", ["topk", "batchtopk"])
def test_forward_and_loss_match_sae_lens(kind):
    sae_lens = pytest.importorskip("sae_lens")
    from sae_lens.saes.sae import TrainStepInput
    torch.manual_seed(0)
    d, m, k, B = 8, 16, 3, 32
    ours = S.SparseAutoencoder(d, m, k, kind, W_enc=torch.randn(d, m), b_enc=0.1 * torch.randn(m),
                               W_dec=torch.nn.functional.normalize(torch.randn(m, d), dim=1), b_dec=torch.randn(d))
    Cfg, Cls = ((sae_lens.TopKTrainingSAEConfig, sae_lens.TopKTrainingSAE) if kind == "topk"
                else (sae_lens.BatchTopKTrainingSAEConfig, sae_lens.BatchTopKTrainingSAE))
    theirs = Cls(Cfg(d_in=d, d_sae=m, k=k, rescale_acts_by_decoder_norm=False))
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(theirs, name).copy_(getattr(ours, name))
    x = torch.randn(B, d)
    with torch.no_grad():
        f_ours = ours.encode(x, batch=True)
        f_theirs = theirs.encode(x)
        assert torch.allclose(f_ours, f_theirs, atol=1e-6)
        assert torch.allclose(ours.decode(f_ours), theirs.decode(f_theirs), atol=1e-5)
        out = theirs.training_forward_pass(TrainStepInput(x, {}, torch.zeros(m, dtype=torch.bool), 0, False))
    ours_mse = (x - ours.decode(f_ours)).pow(2).sum(-1).mean()
    assert torch.allclose(out.losses["mse_loss"], ours_mse, atol=1e-5)


def test_bad_inputs():
    with pytest.raises(ValueError, match="k must be <= the width"):
        S.SparseAutoencoder(4, 3, 5)
    with pytest.raises(ValueError, match="k must be a positive"):
        S.SparseAutoencoder(4, 3, 0)
    with pytest.raises(ValueError, match="W_dec must have shape"):
        S.SparseAutoencoder(4, 3, 1, W_enc=torch.zeros(4, 3), W_dec=torch.zeros(5, 4))
    X = np.ones((10, 4), np.float32); X[3, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        S.train_sae(X, 3, 1, steps=2)
    with pytest.raises(ValueError, match="k must be <= the width"):
        S.train_sae(np.ones((10, 4)), 3, 4, steps=2)
    with pytest.raises(ValueError, match="kind"):
        S.SparseAutoencoder(4, 3, 1, kind="relu")
    with pytest.raises(ValueError, match="decoder width"):
        S.JumpReLUDictionary(np.zeros((4, 3)), np.zeros(3), np.zeros((2, 4)), np.zeros(4), np.zeros(3))
    a = S.JumpReLUDictionary(np.zeros((4, 3)), np.zeros(3), np.eye(3, 4), np.zeros(4), np.zeros(3))
    b = S.JumpReLUDictionary(np.zeros((5, 3)), np.zeros(3), np.eye(3, 5), np.zeros(5), np.zeros(3))
    with pytest.raises(ValueError, match="different input dimension"):
        S.insertion_deltas(a, b, np.zeros((2, 4)))
    with pytest.raises(ValueError, match="n must be a positive"):
        S.sample_activations(S.make_world(np.random.default_rng(0)), 0, np.random.default_rng(0))


def test_training_keeps_unit_decoder_and_threshold(world_and_data):
    world, X, Xt = world_and_data
    sae, hist = S.train_sae(X, 16, 2, steps=300, seed=0)
    assert np.allclose(sae.W_dec.detach().norm(dim=1).numpy(), 1, atol=1e-5)
    assert torch.isfinite(sae.threshold) and float(sae.threshold) > 0
    assert hist.loss[-1] < hist.loss[0]
    # the threshold gives about k active latents per sample at inference
    assert 1.0 < S.mean_l0(sae, Xt) < 3.0
    assert 0 < S.nmse(sae, Xt) < 1
    # inference code of a sample does not depend on its batch
    x = torch.as_tensor(Xt[:20])
    with torch.no_grad():
        assert torch.equal(sae.encode(x, batch=False)[:5], sae.encode(x[:5], batch=False))


def test_meta_sae_bias_fixed_learned_from_zero_and_from_mean():
    """fix_b_dec_zero keeps b_dec exactly at zero even when trained in one loop with models that learn it;
    the official code's setting (learned, initialised at zero) moves it; each model trains as it would alone."""
    rng = np.random.default_rng(3)
    w = S.make_world(rng, n_entities=100)
    metas, hists = S.train_meta_saes([w.entities] * 3, 20, 3, steps=60, seeds=[0, 0, 0],
                                     fix_b_dec_zero=[True, False, False], b_dec_init=["zero", "zero", "mean"])
    fixed, official, from_mean = metas
    assert torch.count_nonzero(fixed.b_dec) == 0
    assert torch.count_nonzero(official.b_dec) > 0 and not torch.allclose(official.b_dec, from_mean.b_dec)
    alone, h_alone = S.train_meta_sae(w.entities, 20, 3, steps=60, seed=0)
    assert np.allclose(hists[0].loss, h_alone.loss, rtol=1e-4)
    assert torch.allclose(fixed.W_dec, alone.W_dec, atol=1e-4)
    g = S.meta_decomposition(fixed, w.entities)
    assert g.shape == (100, 20)
    with pytest.raises(ValueError, match="b_dec_init"):
        S.train_meta_saes([w.entities], 20, 3, steps=2, b_dec_init="median")
    with pytest.raises(ValueError, match="fix_b_dec_zero"):
        S.train_meta_saes([w.entities] * 2, 20, 3, steps=2, seeds=[0, 1], fix_b_dec_zero=[True])


@pytest.mark.parametrize("kind", ["batchtopk", "topk"])
def test_fast_trainer_equals_the_plain_reference_loop(world_and_data, kind):
    """train_saes (batched, mask-skipping) gives bit for bit what the plain one-SAE loop on the
    implementation page gives, AuxK included (latents go dead with dead_after=5, more than k_aux=4)."""
    world, X, Xt = world_and_data
    fast, h_fast = S.train_sae(X, 64, 2, kind, steps=120, seed=3, dead_after=5, k_aux=4, device="cpu")
    ref, h_ref = S.train_sae_reference(X, 64, 2, kind, steps=120, seed=3, dead_after=5, k_aux=4)
    assert max(h_ref.dead) > 4                        # AuxK with more dead latents than k_aux was exercised
    assert h_fast.dead == h_ref.dead and h_fast.loss == h_ref.loss
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.equal(getattr(fast, name), getattr(ref, name)), name
    assert torch.equal(fast.threshold, ref.threshold) or kind == "topk"
    # full batch (every row in every step), as a meta-SAE with a learned b_dec trains
    m_fast, g_fast = S.train_meta_sae(world.entities, 10, 2, steps=40, seed=1, fix_b_dec_zero=False, device="cpu")
    m_ref, g_ref = S.train_sae_reference(world.entities, 10, 2, steps=40, batch_size=10**6, seed=1)
    assert np.allclose(g_fast.loss, g_ref.loss, rtol=1e-5) and torch.allclose(m_fast.W_dec, m_ref.W_dec, atol=1e-5)


def test_summarize_follows_the_widths():
    """run_experiments and summarize work with widths other than the default (no hard-coded 16 or 64)."""
    res = S.run_experiments([0], replicates=2, widths=(8, 24), stitch=(8, 24), topk_width=24, steps=20,
                            meta_steps=10, n_train=1000, n_test=300, n_gt_entities=40)
    table = S.summarize(res)
    assert len(table) == 2 and res[0]["config"]["stitch"] == (8, 24)
    for col in ("nmse_batchtopk", "atoms_small", "atoms_large", "meta_fve", "meta_fve_null", "gt_atoms_official",
                "monotone_full"):
        assert np.isfinite(table[col]).all(), col
    # the stopped path is the full greedy path's prefix
    st = res[0]["stitch"]
    assert np.array_equal(st["path_greedy"], st["path_full"][:len(st["path_greedy"])])
    with pytest.raises(ValueError, match="stitch"):
        S.run_experiments([0], widths=(8, 24), stitch=(16, 64), steps=2)


def test_insertion_deltas_match_brute_force(world_and_data):
    world, X, Xt = world_and_data
    A, _ = S.train_sae(X, 8, 2, steps=200, seed=0)
    B, _ = S.train_sae(X, 16, 2, steps=200, seed=1)
    DA, DB = A.as_dictionary(), B.as_dictionary()
    delta = S.insertion_deltas(A, B, Xt)
    x = Xt.astype(np.float64)
    base = stitching._mse(DA, x)
    for j in (0, 5, 11):
        U = stitching._union(DA, DB).subset(list(range(8)) + [8 + j])
        assert np.isclose(stitching._mse(U, x) - base, delta[j], rtol=1e-6, atol=1e-9)
    # a B latent inside the union fires exactly as in B
    U = stitching._union(DA, DB)
    assert np.allclose(U.encode(x)[:, 8:], DB.encode(x), atol=1e-5)


def test_stitching_path_ends_with_every_move(world_and_data):
    world, X, Xt = world_and_data
    A, _ = S.train_sae(X, 8, 2, steps=200, seed=0)
    B, _ = S.train_sae(X, 16, 2, steps=200, seed=1)
    path, moves = S.stitching_path(A, B, Xt[:300])
    inserted = sorted(j for _, _, b in moves for j in b)
    assert inserted == list(range(16))          # every B latent is added exactly once
    removed = [i for _, a, _ in moves for i in a]
    assert len(removed) == len(set(removed))    # every A latent is removed at most once
    assert len(path) == len(moves) + 1
    assert np.isclose(path[0], stitching._mse(A.as_dictionary(), Xt[:300].astype(np.float64)))


def test_recovery_metrics():
    atoms = np.eye(4)
    assert S.recovered_fraction(atoms, np.eye(4)[:2]) == 0.5
    assert np.allclose(S.max_cosine(np.eye(2), np.eye(2)), 1)
    rng = np.random.default_rng(0)
    w = S.make_world(rng, n_entities=5)
    labels = S.classify_latents(np.vstack([w.atoms[:2], w.entities[:1], -w.atoms[:1]]), w)
    assert list(labels[:3]) == ["atom", "atom", "entity"]


def test_batched_training_matches_separate_runs(world_and_data):
    """train_saes trains each model as it would be trained alone (own data, seed and batches)."""
    world, X, Xt = world_and_data
    X2 = S.sample_activations(world, 6000, np.random.default_rng(9))
    (a, b), (ha, hb) = S.train_saes([X, X2], 12, 2, steps=40, seeds=[3, 4])
    a1, h1 = S.train_sae(X, 12, 2, steps=40, seed=3)
    b1, _ = S.train_sae(X2, 12, 2, steps=40, seed=4)
    for m, m1 in ((a, a1), (b, b1)):
        assert torch.allclose(m.W_dec, m1.W_dec, atol=1e-4) and torch.allclose(m.W_enc, m1.W_enc, atol=1e-4)
        assert torch.allclose(m.threshold, m1.threshold, atol=1e-5)
    assert np.allclose(ha.loss, h1.loss, rtol=1e-4)
    with pytest.raises(ValueError, match="one seed per data set"):
        S.train_saes([X, X2], 12, 2, steps=2, seeds=[0])
    with pytest.raises(ValueError, match="same number of columns"):
        S.train_saes([X, X2[:, :5]], 4, 2, steps=2, seeds=[0, 1])


def test_meta_sae_full_batch_uses_every_row():
    """Full batch means every row in every step: the loss is deterministic given the weights, and
    meta-SAEs of row sets of different sizes train together as they would alone."""
    rng = np.random.default_rng(5)
    w = S.make_world(rng, n_entities=60)
    (m1, m2), (h1, h2) = S.train_meta_saes([w.entities, w.entities[:40]], 10, 2, steps=30, seeds=[0, 1])
    s1, g1 = S.train_meta_sae(w.entities, 10, 2, steps=30, seed=0)
    s2, g2 = S.train_meta_sae(w.entities[:40], 10, 2, steps=30, seed=1)
    assert np.allclose(h1.loss, g1.loss, rtol=1e-4) and np.allclose(h2.loss, g2.loss, rtol=1e-4)
    # step 0 loss = mean over ALL rows of the squared error of the initial model
    init = S.SparseAutoencoder(w.d, 10, 2, "batchtopk", W_dec=s1.W_dec.detach() * 0 + torch.nn.functional.normalize(
        torch.randn(10, w.d, generator=torch.Generator().manual_seed(0)), dim=1), b_dec=torch.zeros(w.d))
    x = torch.as_tensor(w.entities, dtype=torch.float32)
    with torch.no_grad():
        first = float((x - init(x, batch=True)).pow(2).sum(-1).mean())
    assert np.isclose(g1.loss[0], first, rtol=1e-5)


def test_stopped_stitching_path_decreases_at_every_step(world_and_data):
    world, X, Xt = world_and_data
    A, _ = S.train_sae(X, 8, 2, steps=200, seed=0)
    B, _ = S.train_sae(X, 16, 2, steps=200, seed=1)
    path, moves = S.stitching_path(A, B, Xt[:300], stop=True)
    assert len(path) == len(moves) + 1 and (np.diff(path) < 0).all()
    full, _ = S.stitching_path(A, B, Xt[:300], stop=False)
    assert np.allclose(full[:len(path)], path)      # the same greedy choices until it stops


def test_an_explicit_cpu_device_gives_the_same_numbers(world_and_data):
    """Issue 37: the batched trainer and the experiment take a device (default: the GPU when present); on the
    CPU, passing device="cpu" explicitly changes nothing, bit for bit, and the models come back on the CPU."""
    from companion_lib.common import module_device

    world, X, Xt = world_and_data
    kw = dict(steps=60, seeds=[3, 4], dead_after=3, k_aux=2)      # AuxK with more dead latents than k_aux
    (a, b), (ha, hb) = S.train_saes([X, X[:3000]], 64, 2, **kw)
    (c, d), (hc, hd) = S.train_saes([X, X[:3000]], 64, 2, device="cpu", **kw)
    assert max(ha.dead) > 2 and (ha.loss, ha.dead, hb.loss) == (hc.loss, hc.dead, hd.loss)
    for m, m1 in ((a, c), (b, d)):
        assert module_device(m1).type == "cpu"
        assert all(torch.equal(v, m1.state_dict()[name]) for name, v in m.state_dict().items())
    metas = [S.train_meta_saes([world.entities, world.entities[:30]], 10, 3, steps=20, seeds=[0, 1],
                               fix_b_dec_zero=[True, False], **dev)[0] for dev in ({}, {"device": "cpu"})]
    assert all(torch.equal(p, q) for m, m1 in zip(*metas) for p, q in zip(m.parameters(), m1.parameters()))
    cfg = dict(widths=(8, 16), stitch=(8, 16), topk_width=16, steps=10, meta_steps=5, n_train=600, n_test=200,
               n_gt_entities=30)
    r1, r2 = S.run_experiments([0], device="cpu", **cfg), S.run_experiments([0], **cfg)
    assert S.summarize(r1).equals(S.summarize(r2))
    assert module_device(r1[0]["saes"][16]).type == "cpu" and module_device(r1[0]["meta"]["model"]).type == "cpu"


@pytest.mark.parametrize("kind", ["batchtopk", "topk"])
def test_the_batched_loop_keeps_every_tensor_on_its_device(kind):
    """On the meta device (which allocates nothing, and raises when a CPU tensor meets a meta one) the
    batched loop runs every batch layout: one row count for all (batches drawn up front), different row
    counts (drawn step by step), full batch beside drawn batches (masked), and all full batch; the CPU
    generators' draws are moved there and the weights, thresholds and histories stay there. (AuxK is off:
    its branch asks whether a latent is dead, which a meta tensor cannot answer.)"""
    from companion_lib.sae_canonical_units.training import _train_stacked

    rng = np.random.default_rng(0)
    X = [torch.as_tensor(rng.standard_normal((50, 6)), dtype=torch.float32) for _ in range(2)]
    for Xs, batch_size, fixed, inits in [(X, 16, [False, False], ["mean", "mean"]),
                                         ([X[0], X[1][:30]], 16, [False, False], ["mean", "zero"]),
                                         ([X[0], X[1][:30]], 40, [True, False], ["zero", "zero"]),
                                         ([X[0], X[1][:30]], 100, [True, True], ["zero", "zero"])]:
        gens = [torch.Generator().manual_seed(i) for i in range(2)]
        out = _train_stacked(Xs, gens, 8, 2, kind, 3, batch_size, 1e-3, 4, 0.0, 2, fixed, inits, 0.99, "meta")
        assert all(t.device.type == "meta" for t in out)
        assert [tuple(t.shape) for t in out] == [(2, 6, 8), (2, 8), (2, 8, 6), (2, 6), (2,), (3, 2), (3, 2)]


# ----------------------------------------------------------------------------- at full scale (issue 39)
from companion_lib.sae_canonical_units import fullscale as FS   # noqa: E402

FS_WORDS = "the a cat dog sat on mat ran far away big small red blue house tree sun moon and of".split()
#: full_scale at minimal sizes (d = 16 tiny checkpoints)
FS_SMALL = dict(layer=1, widths=(8, 16, 32), k=2, seeds=(0, 1), n_tokens=1200, n_test=400, n_stitch=300, context=16,
                steps=150, batch_size=256, lr=3e-3, k_aux=16, meta_width=8, meta_k=2, meta_steps=150)


def write_texts(path, n=60, words=FS_WORDS, seed=0, fmt="jsonl"):
    """A small text file in a real format: JSON lines with a "text" field (a datasets dump), or plain text."""
    import json

    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(words, 40)) for _ in range(n)]
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"text": t, "meta": {"i": i}}) + "\n" for i, t in enumerate(docs)),
                        encoding="utf-8")
    else:
        path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def test_load_texts_reads_both_formats_and_names_the_problem(tmp_path):
    j = write_texts(tmp_path / "owt.jsonl", n=5)
    t = write_texts(tmp_path / "owt.txt", n=5, fmt="txt")
    assert FS.load_texts(j) == FS.load_texts(t) and len(FS.load_texts(j)) == 5
    (tmp_path / "blank.jsonl").write_text('{"text": "a b"}\n\n{"text": "  "}\n', encoding="utf-8")
    assert FS.load_texts(tmp_path / "blank.jsonl") == ["a b"]          # empty lines and documents are skipped
    cases = {"missing.jsonl": None, "owt.csv": "text\na b\n", "bad.jsonl": '{"text": "a"}\nnot json\n',
             "nofield.jsonl": '{"content": "a"}\n', "list.json": '["a", "b"]\n', "num.jsonl": '{"text": 3}\n',
             "empty.txt": "\n\n  \n"}
    messages = {"missing.jsonl": "does not exist", "owt.csv": "suffix '.csv'", "bad.jsonl": "line 2 of .* is not JSON",
                "nofield.jsonl": 'line 1 of .* has no string "text"', "list.json": "line 1 of .* is a JSON list, not an object",
                "num.jsonl": 'line 1 of .* has no string "text"', "empty.txt": "holds no text"}
    for name, content in cases.items():
        if content is not None:
            (tmp_path / name).write_text(content, encoding="utf-8")
        with pytest.raises(ValueError, match=messages[name]) as err:
            FS.load_texts(tmp_path / name)
        assert ".jsonl" in str(err.value) or '"text"' in str(err.value)     # the supported format is named
    with pytest.raises(TypeError, match="path of a text file"):
        FS.load_texts(3)


@pytest.mark.parametrize("stop", [False, True])
def test_stitching_path_gram_equals_the_direct_path(world_and_data, stop):
    """The Gram-matrix path makes the same moves as stitching_path and finds the same MSEs (greedy to the end,
    stopped, and the naive order)."""
    world, X, Xt = world_and_data
    A, _ = S.train_sae(X, 8, 2, steps=200, seed=0)
    B, _ = S.train_sae(X, 32, 2, steps=200, seed=1)
    for greedy in (True, False):
        direct, moves = S.stitching_path(A, B, Xt[:400], greedy=greedy, stop=stop)
        gram, moves_g = S.stitching_path_gram(A, B, Xt[:400], greedy=greedy, stop=stop)
        assert moves_g == moves and len(moves) > 5
        np.testing.assert_allclose(gram, direct, rtol=1e-9, atol=1e-12)
        if greedy and stop:
            assert (np.diff(gram) < 0).all()


@pytest.mark.parametrize("arch", ["gpt2", "neox", "olmo", "olmo2", "llama"])
def test_residual_activations_are_the_models_hidden_states(tiny_real_lm, arch):
    from companion_lib.tinylm import load_causal_lm

    lm = load_causal_lm(tiny_real_lm(arch, FS_WORDS), device="cpu")
    ids = FS._token_stream(lm.tokenizer, ["the cat sat on the mat", "a big red house and a tree"] * 6)
    assert ids.count(lm.tokenizer.bos_token_id) == 12            # one separator per document (no eos here)
    blocks = FS._blocks(ids, 40, context=8)                        # 40 rows: 6 blocks of 7 kept positions
    assert blocks.shape == (6, 8)
    def n_hooks():
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in lm.model.modules())

    with torch.no_grad():     # (transformers may add hooks of its own on a first forward pass)
        hs = lm.model(input_ids=blocks, output_hidden_states=True).hidden_states
    before = n_hooks()
    for layer in (0, 2):
        X = FS.residual_activations(lm.model, blocks, layer, 40, batch_size=4)
        expect = hs[layer][:, 1:].reshape(-1, 16)[:40]
        if layer == 2:   # Hugging Face's last hidden state is after the final norm; the hooks' layer L is before it
            from companion_lib.tinylm import capture_activations
            with torch.no_grad(), capture_activations(lm.model, 2) as acts:
                lm.model(input_ids=blocks)
            expect = acts[2][:, 1:].reshape(-1, 16)[:40]
        assert X.shape == (40, 16) and X.dtype == np.float32
        np.testing.assert_allclose(X, expect.numpy(), rtol=1e-5, atol=1e-6)
        assert n_hooks() == before                                  # every hook removed afterwards
    with pytest.raises(ValueError, match="the run needs 1000"):
        FS._blocks(ids, 1000, context=8)


def test_sae_memory_bytes_counts_data_indices_parameters_and_a_step():
    base = FS.sae_memory_bytes(1000, 16, (8, 32), 2, 64, 10, 2)
    expect = 4 * 2 * 1000 * 16 + 8 * 10 * 2 * 64 + 16 * 2 * (2 * 16 * 32 + 32 + 16) + 24 * 2 * 64 * 48 + 8 * 2 * 64 * 2
    assert base == expect
    assert FS.sae_memory_bytes(2000, 16, (8, 32), 2, 64, 10, 2) - base == 4 * 2 * 1000 * 16   # linear in tokens
    # the paper-scale default plan (GPT-2 small, d = 768, three seeds) fits a Colab T4's 14.7 GiB with the model
    assert FS.sae_memory_bytes(2**18, 768, (768, 6144), 3, 4096, 2000, 32) / 2**30 < 12


@pytest.mark.parametrize("arch", ["gpt2", "neox", "olmo", "olmo2", "llama"])
def test_full_scale_on_a_tiny_real_checkpoint(tiny_real_lm, tmp_path, arch):
    folder = tiny_real_lm(arch, FS_WORDS)
    out = S.full_scale(str(folder), write_texts(tmp_path / "owt.jsonl"), device="cpu", **FS_SMALL)
    table, sweep, cfg = out["table"], out["sweep"], out["config"]
    assert list(table.index) == [0, 1] and cfg["small"] == 8 and cfg["large"] == 16 and cfg["widest"] == 32
    assert len(sweep) == 2 * 4 and set(sweep.kind) == {"batchtopk", "topk"}
    assert ((sweep.nmse > 0) & (sweep.nmse < 1)).all()             # every SAE reconstructs better than the mean
    assert (table.l0_topk == 2).all()                              # TopK's L0 is k by construction
    for st, (_, row) in zip(out["stitch"], table.iterrows()):
        assert len(st["delta"]) == len(st["maxcos"]) <= 16 and -1 <= row.spearman <= 1
        assert np.isclose(st["path_full"][0], row.path_start) and row.n_moves == len(st["path_full"]) - 1
        assert (np.diff(st["path_greedy"]) < 0).all()             # the stopped prefix decreases at every step
    assert ((table.meta_fve <= 1) & (table.meta_fve_null <= 1)).all()
    assert (table.meta_rows <= 32).all() and out["scale"] > 0
    # the states were divided by their root mean squared norm: the training rows have unit mean squared norm
    assert 0 < table.path_start.max() < 2


class _NoWeights(RuntimeError):
    pass


def test_full_scale_refuses_bad_input_before_reading_weights(tiny_real_lm, tmp_path, monkeypatch):
    import transformers as tf

    import companion_lib.tinylm as tinylm

    def no_weights(*a, **k):
        raise _NoWeights("weights would load now")

    monkeypatch.setattr(tinylm, "load_causal_lm", no_weights)
    folder = str(tiny_real_lm("gpt2", FS_WORDS))
    data = write_texts(tmp_path / "owt.jsonl")
    bert = tmp_path / "bert"
    tf.BertForMaskedLM(tf.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32)).save_pretrained(bert)
    with pytest.raises(ValueError, match="BertForMaskedLM checkpoint.*GPT2LMHeadModel, GPTNeoXForCausalLM"):
        S.full_scale(str(bert), data, **FS_SMALL)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="cannot load the config"):
        S.full_scale(str(tmp_path / "empty"), data, **FS_SMALL)
    with pytest.raises(ValueError, match=r"needs about .* GiB .* GiB free: lower n_tokens"):
        S.full_scale(folder, data, free_bytes=10_000, **FS_SMALL)
    (tmp_path / "owt.csv").write_text("text\nthe cat\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"suffix '.csv'; supported: .txt"):
        S.full_scale(folder, tmp_path / "owt.csv", **FS_SMALL)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\]"):
        S.full_scale(folder, data, **{**FS_SMALL, "layer": 8})
    with pytest.raises(ValueError, match="the run needs 1000400"):
        S.full_scale(folder, data, **{**FS_SMALL, "n_tokens": 10**6, "steps": 1})
    with pytest.raises(ValueError, match="at least two seeds"):
        S.full_scale(folder, data, **{**FS_SMALL, "seeds": (0,)})
    with pytest.raises(ValueError, match="two different widths"):
        S.full_scale(folder, data, **{**FS_SMALL, "widths": (8, 8)})
    with pytest.raises(ValueError, match="k .* must be <= the narrowest width"):
        S.full_scale(folder, data, **{**FS_SMALL, "k": 9})
    with pytest.raises(ValueError, match="dtype must be one of"):
        S.full_scale(folder, data, dtype="int8", **FS_SMALL)
    with pytest.raises(_NoWeights):                # every check passed: only now would the weights load
        S.full_scale(folder, data, **FS_SMALL)


@pytest.mark.slow
def test_reproduce_page_runs_at_full_scale_on_a_tiny_gpt2(tiny_real_lm, tmp_path, run_reproduce):
    import json
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    folder = tiny_real_lm("gpt2", FS_WORDS)
    data = write_texts(tmp_path / "owt.jsonl")
    # the synthetic run at minimal sizes (two worlds), then the full-scale section on the tiny checkpoint
    params = dict(widths=[16, 64], steps=800, n_train=8000, seeds=[0], replicates=2, meta_steps=600,
                  model=str(folder), data=str(data), layer=1, fs_widths=[8, 16, 32], fs_k=2, fs_seeds=[0, 1],
                  fs_tokens=1200, fs_test=400, fs_stitch=300, fs_context=16, fs_steps=150, fs_batch=256, fs_lr=3e-3,
                  fs_k_aux=16, fs_meta_width=8, fs_meta_k=2, fs_meta_steps=150)
    t0 = time.perf_counter()
    _, claims, error = run_reproduce(root / "chapters" / "13-sae-canonical-units" / "reproduce.md", params,
                                     "full-scale", checks_off_before="At full scale")
    elapsed = time.perf_counter() - t0
    assert error is None, error
    assert claims is not None and claims["chapter"] == "13-sae-canonical-units-full-scale"
    keys = ["fs_bt_nmse", "fs_bt_l0", "fs_maxcos_proxy", "fs_path_monotone", "fs_meta_fve", "fs_meta_maxcos"]
    decided = [c for c in claims["claims"] if c["outcome"] != "not run"]
    assert [c["key"] for c in decided] == keys and all(c["n"] == 2 and c["verdict"] for c in decided)
    assert {c["key"] for c in claims["claims"] if c["outcome"] == "not run"} >= {"fs_atoms_small", "fs_meta_atoms"}
    written = json.loads((tmp_path / "claims" / "13-sae-canonical-units-full-scale.json").read_text(encoding="utf-8"))
    assert [c["key"] for c in written["claims"]] == [c["key"] for c in claims["claims"]]
    assert (tmp_path / "claims" / "13-sae-canonical-units.json").exists()      # the book's table is still made
    print(f"reproduce page at full scale on a tiny GPT-2: {elapsed:.1f} s")
