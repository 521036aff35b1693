"""Unit tests of companion_lib.turing_prompting (Qiu et al., ICLR 2025)."""

import itertools

import numpy as np
import pytest

from companion_lib import turing_prompting as tp


def all_inputs(max_len):
    for n in range(max_len + 1):
        for bits in itertools.product("01", repeat=n):
            yield "".join(bits)


# -- programs, prompts, tokenizer -------------------------------------------------------------------
def test_alphabet_has_23_tokens():
    assert len(tp.TOKENS) == 23 and len(set(tp.TOKENS)) == 23


def test_parse_program_accepts_and_formats():
    prog = tp.parse_program(["A!+2", "BR", "B?-1", "#"])
    assert [str(i) for i in prog] == ["A!+2", "BR", "B?-1", "#"]
    assert tp.parse_program("A!2 AR #")[0].offset == 2


@pytest.mark.parametrize("bad, match", [
    (["AX"], "not a 2-PTM instruction"), (["A!+0", "#"], "non-zero"), (["A!+5", "#"], "outside"),
    ([], "at least one"), (["C1"], "not a 2-PTM"), (["A?-1"], "outside")])
def test_parse_program_rejects_malformed(bad, match):
    with pytest.raises(ValueError, match=match):
        tp.parse_program(bad)


def test_parse_program_type_errors():
    with pytest.raises(TypeError):
        tp.parse_program(42)
    with pytest.raises(TypeError):
        tp.parse_program(["AR", 3])


def test_format_prompt_matches_official_parity_prompt():
    expected = ("^A!++++@ARARA?--@A1ARA1A?+++@ALALALALALA?++@#ARARA0ARA!-----------@A0ALALA?+++@"
                "A1A?++@A0ALA?-----------------@$")
    assert "".join(tp.format_prompt(tp.PARITY_PROGRAM)) == expected


def test_tokenize_counts_and_empty():
    assert tp.tokenize("") == []
    toks = tp.tokenize("10")
    assert toks[:4] == ["AR"] * 4
    c = toks.index("=")
    assert toks[c + 1:-1] == ["-"] * c and toks[-1] == "@"
    with pytest.raises(ValueError, match="x must contain"):
        tp.tokenize("012")
    with pytest.raises(TypeError):
        tp.tokenize(5)


def test_input_tape_convention():
    assert tp.input_tape("01") == {0: 1, 1: 0, 2: 1, 3: 1}


# -- interpreter --------------------------------------------------------------------------------
def test_interpreter_parity_and_dyck_all_inputs_up_to_10_bits():
    for x in all_inputs(10):
        assert tp.run_ptm(tp.PARITY_PROGRAM, x).output == tp.decide_parity(x), x
        assert tp.run_ptm(tp.DYCK_PROGRAM, x).output == tp.decide_dyck(x), x


def test_official_empty_input_cot():
    assert "".join(tp.cot_tokens(tp.PARITY_PROGRAM, "")) == "=++++@A1ARA1=+++@ALALAL/:1$"


def test_readout_and_errors():
    assert tp.readout(list("=++@/:") + ["1", "0", "$"]) == "10"
    with pytest.raises(ValueError):
        tp.readout(["AR", "AL"])


def test_interpreter_step_limit_and_pointer_error():
    loop = ["AR", "A!-1", "#"]     # A is never written: jumps back forever
    run = tp.run_ptm(loop, "", max_steps=10)
    assert not run.halted and run.output is None and run.steps == 10
    with pytest.raises(RuntimeError, match="left the program"):
        tp.run_ptm(["AR"], "")
    with pytest.raises(ValueError):
        tp.run_ptm(loop, "", max_steps=-1)


def test_decide_reference_functions():
    assert tp.decide_parity("") == "1" and tp.decide_parity("1") == "0"
    assert tp.decide_dyck("0101") == "1" and tp.decide_dyck("10") == "0" and tp.decide_dyck("0") == "0"


# -- numbers ------------------------------------------------------------------------------------
def test_angle_code_and_position_gap():
    u = tp.angle_code(np.arange(-3, 4))
    assert np.allclose((u ** 2).sum(-1), 1)
    sims = u @ u.T
    assert np.allclose(np.diag(sims), 1) and (sims[~np.eye(7, dtype=bool)] < 1 - 1e-3).all()
    p = np.arange(1, 50)
    direct = 1 - (tp.angle_code(p) * tp.angle_code(p + 1)).sum(-1)
    assert np.allclose(tp.position_gap(p), direct, rtol=1e-6)
    assert np.allclose(tp.position_gap(1000.0) * 2 * 1000.0 ** 4, 1, rtol=1e-2)
    with pytest.raises(ValueError):
        tp.position_gap(-1)


def test_backend_validation():
    with pytest.raises(ValueError):
        tp.FloatBackend(70)
    with pytest.raises(TypeError):
        tp.FloatBackend(1.5)
    with pytest.raises(ValueError):
        tp.ExactBackend(bits=200, digits=20)
    with pytest.raises(TypeError):
        tp.FixedTransformer(backend="float")


def test_precision_bound_bits():
    assert tp.precision_bound_bits(2 ** 10) == pytest.approx(51)
    with pytest.raises(ValueError):
        tp.precision_bound_bits(0)


# -- the Transformer ----------------------------------------------------------------------------
def test_network_size_is_fixed():
    size = tp.network_size()
    assert size["heads"] == 15 and size["tokens"] == 23 and size["norms"] > 10


def test_transformer_reproduces_official_parity_cot():
    model = tp.FixedTransformer(tp.FloatBackend(46))
    out = model.generate(tp.prompt_tokens(tp.PARITY_PROGRAM, ""))
    assert "".join(out) == "=++++@A1ARA1=+++@ALALAL/:1$"


@pytest.mark.parametrize("x", ["", "1", "01", "110"])
def test_transformer_decoding_equals_interpreter_trace(x):
    model = tp.FixedTransformer(tp.FloatBackend(56, np.longdouble))
    for prog, decide in ((tp.PARITY_PROGRAM, tp.decide_parity), (tp.DYCK_PROGRAM, tp.decide_dyck)):
        generated = model.generate(tp.prompt_tokens(prog, x))
        assert generated == tp.cot_tokens(prog, x)
        assert tp.readout(generated) == decide(x)


def test_float64_breaks_where_exact_arithmetic_does_not():
    # Dyck on '01' (272 tokens): float64 at 46 bits cannot separate two writes to the same cell
    # (latest-write gap ~ I^-6); long double at 56 bits can.
    pos64, n = tp.first_mismatch(tp.DYCK_PROGRAM, "01", tp.FloatBackend(46))
    assert pos64 is not None and pos64 < n
    pos_ld, _ = tp.first_mismatch(tp.DYCK_PROGRAM, "01", tp.FloatBackend(56, np.longdouble))
    assert pos_ld is None


def test_predict_equals_generate_and_first_mismatch():
    prog, x = tp.PARITY_PROGRAM, "10"
    model = tp.FixedTransformer(tp.FloatBackend(46), block=32)
    prompt = tp.prompt_tokens(prog, x)
    gen = model.generate(prompt)
    pred = model.predict(prompt + gen[:-1])
    assert pred[len(prompt) - 1:] == gen
    assert tp.first_mismatch(prog, x, tp.FloatBackend(46)) == (None, len(prompt) + len(gen))
    pos, _ = tp.first_mismatch(prog, x, tp.FloatBackend(8))
    assert pos is not None and pos >= len(prompt) - 1


def test_exact_backend_agrees_with_float():
    seq = tp.prompt_tokens(tp.PARITY_PROGRAM, "") + tp.cot_tokens(tp.PARITY_PROGRAM, "")
    a = tp.FixedTransformer(tp.FloatBackend(46)).predict(seq)
    b = tp.FixedTransformer(tp.ExactBackend(bits=66, digits=40)).predict(seq)
    assert a == b


def test_transformer_rejects_unknown_tokens_and_features():
    model = tp.FixedTransformer()
    with pytest.raises(ValueError, match="alphabet"):
        model.predict(["^", "XX"])
    with pytest.raises(ValueError):
        model.predict([])
    with pytest.raises(ValueError, match="unknown feature"):
        model.features(["^", "#", "$"], ["nope"])


def test_features_decode_head_position_and_tape():
    toks = tp.prompt_tokens(["#"], "") + ["AR", "AR", "A1"]
    f = tp.FixedTransformer().features(toks, ["a_code0", "a_code1", "a_val"])
    h = f["a_code0"] / f["a_code1"]
    assert np.allclose(h[-3:], [1, 2, 2])


# -- Turing machines ----------------------------------------------------------------------------
@pytest.mark.parametrize("make", [tp.tm_not, tp.tm_increment, tp.tm_parity])
def test_compiled_tm_matches_tm(make):
    tm = make()
    prog = tp.compile_tm(tm)
    assert len(prog) == 27 * tm.n_states
    for x in all_inputs(5):
        out, t = tp.run_tm(tm, x)
        run = tp.run_ptm(prog, x)
        assert run.halted and run.output == out
        assert 7 * t <= run.steps <= 9 * t + 3


def test_tm_semantics():
    assert tp.run_tm(tp.tm_not(), "0110")[0] == "1001"
    assert tp.run_tm(tp.tm_increment(), "11")[0] == "001"
    assert tp.run_tm(tp.tm_parity(), "1101")[0] == "1"
    with pytest.raises(ValueError):
        tp.TwoTapeTM(1, {(0, 0, 0): (3, 0, 0, "R", "S")})
    with pytest.raises(ValueError):
        tp.TwoTapeTM(1, {(0, 0, 0): (0, 0, 0, "X", "S")})
    with pytest.raises(TypeError):
        tp.compile_tm("tm")


# -- random programs ----------------------------------------------------------------------------
def test_random_program_is_valid_and_runs_on_transformer():
    rng = np.random.default_rng(0)
    for _ in range(3):
        prog = tp.random_program(rng, 8)
        assert prog[-1] == "#" and len(prog) == 8
        pos, _ = tp.first_mismatch(prog, "01", tp.FloatBackend(56, np.longdouble), max_cot=60)
        assert pos is None
    with pytest.raises(TypeError):
        tp.random_program(0)
    with pytest.raises(ValueError):
        tp.random_program(rng, 1)
