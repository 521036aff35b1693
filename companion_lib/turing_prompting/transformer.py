r"""The fixed Transformer :math:`\Gamma` of Theorem 3.1 (:class:`FixedTransformer`) as a list of named
operations (:data:`NETWORK`: hardmax attention heads, layer normalisation without centring, ReLU features),
its teacher-forced comparison with the interpreter (:func:`first_mismatch`) and the precision bound
(:func:`precision_bound_bits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .programs import INSTRUCTION_TOKENS, TOKENS, prompt_tokens, readout, run_ptm
from .arithmetic import ExactBackend, FloatBackend

__all__ = [
    "Head", "Norm", "Feature", "NETWORK", "network_size", "FixedTransformer", "first_mismatch", "precision_bound_bits",
]


@dataclass(frozen=True)
class Head:
    r"""A causal hardmax attention head. The score of position :math:`i` for key :math:`k\le i` is
    :math:`s_{ik}=\min(2,\sum_j q_j[i]\,k_j[k])`; after rounding, the head averages the value features
    over the positions with maximal score (ties share equally) and writes them to ``out``."""

    name: str
    query: tuple[str, ...]
    key: tuple[str, ...]
    value: tuple[str, ...]
    out: tuple[str, ...]
    role: str = ""


@dataclass(frozen=True)
class Norm:
    r"""Layer normalisation without centring: :math:`z\mapsto z/\lVert z\rVert_2`, and :math:`z` itself
    when it rounds to zero."""

    name: str
    inputs: tuple[str, ...]
    out: tuple[str, ...]
    role: str = ""


@dataclass(frozen=True)
class Feature:
    """A position-wise feature: a ReLU expression of earlier features (an MLP line)."""

    name: str
    fn: Callable[[dict], object]
    role: str = ""


def _relu(v):
    return np.maximum(v, 0)


_MOVE_WRITE = ("AL", "AR", "A0", "A1", "BL", "BR", "B0", "B1")


def _s(f, *toks):
    """Sum of token indicators."""
    total = f["is_" + toks[0]]
    for t in toks[1:]:
        total = total + f["is_" + t]
    return total


def _cot(f, v):
    """ReLU(v + after_delim - 1): the indicator v, counted only after the prompt's '$'."""
    return _relu(v + f["after_delim"] - 1)


def _features(*pairs):
    return [Feature(name, fn, role) for name, fn, role in pairs]


_LOGIT_TOKENS: tuple[str, ...] = ("AL", "AR", "A0", "A1", "BL", "BR", "B0", "B1", "/", "=", "-", "+",
                                  "@", ":", "0", "1", "$")

#: The network :math:`\Gamma`: the same list of heads, norms and features runs every prompt.
NETWORK: tuple = tuple([
    # --- where are we: uniform heads give prefix means, LN turns them into codes -------------------
    Head("start_mean", ("one",), ("one",), ("is_^",), ("start_mean",), "uniform: 1/p (p = position+1)"),
    Head("delim_mean", ("one",), ("one",), ("is_$",), ("delim_mean",), "uniform: share of '$' so far"),
    Norm("after_delim", ("delim_mean",), ("after_delim",), "1 after the prompt's '$', else 0"),
    *_features(
        ("a_write", lambda f: _cot(f, _s(f, "A0", "A1")), "CoT writes on tape A"),
        ("b_write", lambda f: _cot(f, _s(f, "B0", "B1")), "CoT writes on tape B"),
        ("a_bit", lambda f: _cot(f, f["is_A1"]), "bit written on A"),
        ("b_bit", lambda f: _cot(f, f["is_B1"]), "bit written on B"),
        ("a_move", lambda f: _cot(f, f["is_AR"]) - _cot(f, f["is_AL"]), "head move on A"),
        ("b_move", lambda f: _cot(f, f["is_BR"]) - _cot(f, f["is_BL"]), "head move on B")),
    # --- tapes: head positions as angle codes, latest-write retrieval --------------------------------
    Head("head_means", ("one",), ("one",), ("a_move", "b_move"), ("a_head_mean", "b_head_mean"),
         "uniform: h/p for both heads"),
    Norm("a_code", ("a_head_mean", "start_mean"), ("a_code0", "a_code1"), "u(h_A)"),
    Norm("b_code", ("b_head_mean", "start_mean"), ("b_code0", "b_code1"), "u(h_B)"),
    Head("a_read", ("one", "a_code0", "a_code1", "pe_gap"), ("a_write", "a_code0", "a_code1", "neg_pe_inv"),
         ("a_bit", "a_code0", "a_write"), ("a_got_bit", "a_got_code0", "a_got_write"),
         "latest write at the cell under head A"),
    Head("b_read", ("one", "b_code0", "b_code1", "pe_gap"), ("b_write", "b_code0", "b_code1", "neg_pe_inv"),
         ("b_bit", "b_code0", "b_write"), ("b_got_bit", "b_got_code0", "b_got_write"),
         "latest write at the cell under head B"),
    *_features(("a_code_diff", lambda f: f["a_code0"] - f["a_got_code0"], ""),
               ("b_code_diff", lambda f: f["b_code0"] - f["b_got_code0"], "")),
    Norm("a_miss_sign", ("a_code_diff",), ("a_miss_sign",), "sign of the code difference"),
    Norm("b_miss_sign", ("b_code_diff",), ("b_miss_sign",), "sign of the code difference"),
    *_features(
        ("a_missing", lambda f: _relu(f["a_miss_sign"]) + _relu(-f["a_miss_sign"]), "NotEqual: cell never written"),
        ("b_missing", lambda f: _relu(f["b_miss_sign"]) + _relu(-f["b_miss_sign"]), "NotEqual: cell never written"),
        ("a_val", lambda f: _relu(f["a_got_bit"] - f["a_missing"] - 1 + f["a_got_write"]), "bit under head A"),
        ("b_val", lambda f: _relu(f["b_got_bit"] - f["b_missing"] - 1 + f["b_got_write"]), "bit under head B"),
        ("is_inst", lambda f: _relu(_s(f, *INSTRUCTION_TOKENS) - f["after_delim"]), "instruction token in the prompt"),
        ("is_cond", lambda f: _s(f, "A!", "A?", "B!", "B?"), "conditional-jump token")),
    # --- the program: instruction index codes and offset-token codes ---------------------------------
    Head("inst_mean", ("one",), ("one",), ("is_inst",), ("inst_mean",), "uniform: #instructions/p"),
    Feature("inst_index", lambda f: f["inst_mean"] - f["start_mean"], "(index of latest instruction)/p"),
    Norm("idx_code", ("inst_index", "start_mean"), ("idx_code0", "idx_code1"), "u(instruction index)"),
    Head("cond_mean", ("one",), ("idx_code0",), ("is_cond",), ("cond_mean",),
         "tokens of the latest instruction: 1/(j+1) at the j-th offset token"),
    Feature("not_cond_mean", lambda f: 1 - f["cond_mean"], ""),
    Norm("off_code_raw", ("not_cond_mean", "cond_mean"), ("off_raw0", "off_raw1"), "u(j)"),
    *_features(
        ("off_code0", lambda f: f["off_raw0"] + f["is_cond"], "u(j), or (1,0) at the instruction token"),
        ("off_code1", lambda f: f["off_raw1"] - f["is_cond"], ""),
        ("rec_start", lambda f: f["is_^"] + _cot(f, _s(f, *_MOVE_WRITE, "/", "=")), "a CoT record starts"),
        ("rec_end", lambda f: _cot(f, _s(f, "$", *_MOVE_WRITE, "@")), "a CoT record ends")),
    # --- the CoT: records, offsets being copied, the instruction pointer -----------------------------
    Head("rec_mean", ("one",), ("rec_start",), ("is_^",), ("rec_mean",), "1/R, R = number of records"),
    Norm("rec_code", ("one", "rec_mean"), ("rec_code0", "rec_code1"), "u(R)"),
    *_features(("neg_rec_code0", lambda f: -f["rec_code0"], ""), ("neg_rec_code1", lambda f: -f["rec_code1"], "")),
    Head("sat_mean", ("neg_one",), ("rec_mean",), ("is_=",), ("sat_mean",),
         "current record: 1/(j+1) after j offset tokens of a taken jump"),
    Norm("copy_code_raw", ("one", "sat_mean"), ("copy_raw0", "copy_raw1"), "u(j+1)"),
    *_features(
        ("copy_code0", lambda f: _relu(f["copy_raw0"] - f["rec_end"]) + f["rec_end"], "next offset token to copy"),
        ("copy_code1", lambda f: _relu(f["copy_raw1"] - f["rec_end"]), "")),
    Head("rec_gap", ("rec_code0", "rec_code1"), ("pe_code0", "pe_code1"), ("pe_gap",), ("rec_gap",),
         "look up 1-u(R)^T u(R+1) at position R"),
    *_features(
        ("in_jump", lambda f: _cot(f, _s(f, "=", "-", "+")), "inside a taken jump"),
        ("rec_bias", lambda f: 3 - _relu(f["rec_gap"] / 2 - 1 + f["in_jump"]), "3, or 2.5-ish inside a jump"),
        ("ptr_move", lambda f: _cot(f, _s(f, *_MOVE_WRITE, "+", "/")) - _cot(f, f["is_-"]), "pointer moves")),
    Head("pointer", ("rec_bias", "neg_rec_code0", "neg_rec_code1"), ("one", "rec_code0", "rec_code1"),
         ("ptr_move", "is_^"), ("ptr_mean", "ptr_start"),
         "prefix mean of pointer moves, leaving out the current jump record"),
    Norm("ptr_code", ("ptr_mean", "ptr_start"), ("ptr_code0", "ptr_code1"), "u(j), j = instruction pointer"),
    Head("fetch", ("ptr_code0", "ptr_code1", "copy_code0", "copy_code1", "pe_gap", "neg_one"),
         ("idx_code0", "idx_code1", "off_code0", "off_code1", "pe_inv", "one"),
         ("is_AL", "is_AR", "is_A0", "is_A1", "is_A!", "is_A?", "is_BL", "is_BR", "is_B0", "is_B1",
          "is_B!", "is_B?", "is_-", "is_+", "is_@", "is_#"),
         ("f_AL", "f_AR", "f_A0", "f_A1", "f_A!", "f_A?", "f_BL", "f_BR", "f_B0", "f_B1",
          "f_B!", "f_B?", "f_-", "f_+", "f_@", "f_#"),
         "fetch instruction j (or its next offset token)"),
    *_features(
        ("jump_taken", lambda f: (_relu(f["f_A!"] - f["a_val"]) + _relu(f["f_A?"] + f["a_val"] - 1)
                                  + _relu(f["f_B!"] - f["b_val"]) + _relu(f["f_B?"] + f["b_val"] - 1)),
         "T! and cell 0, or T? and cell 1"),
        ("jump_not_taken", lambda f: f["f_A!"] + f["f_A?"] + f["f_B!"] + f["f_B?"] - f["jump_taken"], ""),
        # --- readout after '#': cells 2r and 2r+1 of tape A ------------------------------------------
        ("is_read", lambda f: _s(f, ":", "0", "1"), "readout phase"),
        ("read_shift0", lambda f: 2 * _s(f, "0", "1"), ""),
        ("read_shift1", lambda f: f["is_:"] + 2 * _s(f, "0", "1"), "")),
    Head("read_means", ("one",), ("is_read",), ("read_shift0", "read_shift1", "is_:"),
         ("read_mean0", "read_mean1", "read_start"), "2r/(r+1), (2r+1)/(r+1), 1/(r+1)"),
    Norm("read_code0", ("read_mean0", "read_start"), ("rc0_0", "rc0_1"), "u(2r)"),
    Norm("read_code1", ("read_mean1", "read_start"), ("rc1_0", "rc1_1"), "u(2r+1)"),
    Head("read_marker", ("one", "rc0_0", "rc0_1", "pe_gap"), ("a_write", "a_code0", "a_code1", "neg_pe_inv"),
         ("a_bit", "a_code0", "a_write"), ("m_got_bit", "m_got_code0", "m_got_write"), "A[2r]"),
    Head("read_value", ("one", "rc1_0", "rc1_1", "pe_gap"), ("a_write", "a_code0", "a_code1", "neg_pe_inv"),
         ("a_bit", "a_code0", "a_write"), ("v_got_bit", "v_got_code0", "v_got_write"), "A[2r+1]"),
    *_features(("m_code_diff", lambda f: f["rc0_0"] - f["m_got_code0"], ""),
               ("v_code_diff", lambda f: f["rc1_0"] - f["v_got_code0"], "")),
    Norm("m_miss_sign", ("m_code_diff",), ("m_miss_sign",), ""),
    Norm("v_miss_sign", ("v_code_diff",), ("v_miss_sign",), ""),
    *_features(
        ("m_val", lambda f: _relu(f["m_got_bit"] - _relu(f["m_miss_sign"]) - _relu(-f["m_miss_sign"]) - 1
                                  + f["m_got_write"]), "marker bit A[2r]"),
        ("v_val", lambda f: _relu(f["v_got_bit"] - _relu(f["v_miss_sign"]) - _relu(-f["v_miss_sign"]) - 1
                                  + f["v_got_write"]), "value bit A[2r+1]"),
        # --- next-token logits ------------------------------------------------------------------------
        ("logit_/", lambda f: f["jump_not_taken"], ""),
        ("logit_=", lambda f: f["jump_taken"], ""),
        ("logit_:", lambda f: f["f_#"], ""),
        ("logit_0", lambda f: 2 * _relu(f["is_read"] + f["m_val"] - f["v_val"] - 1), ""),
        ("logit_1", lambda f: 2 * _relu(f["is_read"] + f["m_val"] + f["v_val"] - 2), ""),
        ("logit_$", lambda f: 2 * _relu(f["is_read"] - f["m_val"]), "")),
])


def network_size(network: Sequence = NETWORK) -> dict[str, int]:
    """Counts of heads, norms and ReLU features of the network; none depends on the program."""
    return {"heads": sum(isinstance(o, Head) for o in network),
            "norms": sum(isinstance(o, Norm) for o in network),
            "features": sum(isinstance(o, Feature) for o in network),
            "tokens": len(TOKENS)}


def _logit_name(tok: str) -> str:
    return f"f_{tok}" if tok in _MOVE_WRITE or tok in "-+@" else f"logit_{tok}"


class FixedTransformer:
    r"""The Transformer :math:`\Gamma` of Theorem 3.1: one fixed network (:data:`NETWORK`) that
    executes whatever 2-PTM program its prompt holds.

    ``predict(tokens)`` runs the whole sequence in parallel (causal masking) and returns the greedy
    next token at every position; ``generate(prompt)`` decodes greedily, one token at a time with a
    cache of earlier positions, until ``$``. Both share the same code path (positions are processed
    in row blocks of ``block`` queries).
    """

    def __init__(self, backend: FloatBackend | ExactBackend | None = None, block: int = 256) -> None:
        self.backend = backend if backend is not None else FloatBackend(46)
        if not isinstance(self.backend, (FloatBackend, ExactBackend)):
            raise TypeError("backend must be a FloatBackend or an ExactBackend")
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.block = int(block)

    # -- internals --------------------------------------------------------------------------------
    def _new_state(self) -> dict:
        return {"cols": {}, "n": 0, "cap": 0, "tokens": []}

    def _grow(self, st: dict, need: int) -> None:
        if need <= st["cap"]:
            return
        cap = max(need, 2 * st["cap"], 64)
        for name, arr in st["cols"].items():
            new = self.backend.zeros(cap)
            new[: st["n"]] = arr[: st["n"]]
            st["cols"][name] = new
        st["cap"] = cap

    def _set(self, st: dict, name: str, s: int, e: int, values) -> None:
        col = st["cols"].get(name)
        if col is None:
            col = st["cols"][name] = self.backend.zeros(st["cap"])
        col[s:e] = values

    def _attend(self, st: dict, op: Head, s: int, e: int) -> None:
        be, cols = self.backend, st["cols"]
        scores = None                                                  # (rows s..e-1, keys 0..e-1)
        for q, k in zip(op.query, op.key):
            term = np.multiply.outer(cols[q][s:e], cols[k][:e])
            scores = term if scores is None else scores + term
        scores = np.minimum(scores, be.const(2))                       # clipped similarity
        r, c = np.triu_indices(e - s, 1)                               # causal mask: the future of
        scores[r, s + c] = be.const(-(10 ** 9))                        # a row lies in columns s..e-1
        if be.dtype is object:
            # Rounding is monotone: the rounded maximum is round(max), and only scores within one
            # rounding step of the raw maximum can tie with it. Round just those (Decimal is slow).
            raw_best = scores.max(axis=1)
            best = be.quantize(raw_best)
            hit = scores >= (raw_best - 2 * be.step)[:, None]
            rr, cc = np.nonzero(hit)
            hit[rr, cc] = be.quantize(scores[rr, cc]) == best[rr]
        else:
            scores = be.quantize(scores)
            hit = scores == scores.max(axis=1)[:, None]                 # hardmax: ties share
        count = hit.sum(axis=1)
        weights = be.from_ints(hit) / be.from_ints(count)[:, None]
        for v, out in zip(op.value, op.out):
            self._set(st, out, s, e, weights.dot(cols[v][:e]))

    def _norm(self, st: dict, op: Norm, s: int, e: int) -> None:
        be, cols = self.backend, st["cols"]
        xs = [cols[name][s:e] for name in op.inputs]
        zero = np.ones(e - s, dtype=bool)
        for x in xs:
            zero &= be.quantize(x) == be.const(0)
        sq = xs[0] * xs[0]
        for x in xs[1:]:
            sq = sq + x * x
        norm = be.sqrt(np.where(zero, be.const(1), sq))
        for x, out in zip(xs, op.out):
            self._set(st, out, s, e, np.where(zero, x, x / norm))

    def _embed(self, st: dict, tokens: Sequence[str], s: int, e: int) -> None:
        be = self.backend
        toks = np.asarray(tokens[s:e], dtype=object)
        for t in TOKENS:
            self._set(st, "is_" + t, s, e, be.from_ints(toks == t))
        self._set(st, "one", s, e, be.from_ints(np.ones(e - s, dtype=int)))
        self._set(st, "neg_one", s, e, be.from_ints(-np.ones(e - s, dtype=int)))
        inv, gap, c0, c1 = be.position_features(np.arange(s + 1, e + 1))
        self._set(st, "pe_inv", s, e, inv)
        self._set(st, "neg_pe_inv", s, e, -inv)
        self._set(st, "pe_gap", s, e, gap)
        self._set(st, "pe_code0", s, e, c0)
        self._set(st, "pe_code1", s, e, c1)

    def _run(self, st: dict, new_tokens: Sequence[str]) -> None:
        bad = [t for t in new_tokens if t not in TOKENS]
        if bad:
            raise ValueError(f"tokens must come from the 23-token alphabet, got {bad[0]!r}")
        st["tokens"].extend(new_tokens)
        self._grow(st, len(st["tokens"]))
        with self.backend.context():
            while st["n"] < len(st["tokens"]):
                s = st["n"]
                e = min(len(st["tokens"]), s + self.block)
                self._embed(st, st["tokens"], s, e)
                view = _RowView(st["cols"], s, e)
                for op in NETWORK:
                    if isinstance(op, Head):
                        self._attend(st, op, s, e)
                    elif isinstance(op, Norm):
                        self._norm(st, op, s, e)
                    else:
                        self._set(st, op.name, s, e, op.fn(view))
                st["n"] = e

    def _argmax(self, st: dict, s: int, e: int) -> list[str]:
        logits = np.stack([np.asarray(st["cols"][_logit_name(t)][s:e], dtype=float)
                           if self.backend.dtype is not object else
                           np.array([float(v) for v in st["cols"][_logit_name(t)][s:e]])
                           for t in _LOGIT_TOKENS], axis=1)
        return [_LOGIT_TOKENS[i] for i in logits.argmax(axis=1)]

    # -- public -----------------------------------------------------------------------------------
    def predict(self, tokens: Sequence[str]) -> list[str]:
        """Greedy next token at every position of ``tokens`` (one parallel causal pass)."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError("tokens must be non-empty")
        st = self._new_state()
        self._run(st, tokens)
        return self._argmax(st, 0, len(tokens))

    def features(self, tokens: Sequence[str], names: Sequence[str]) -> dict[str, np.ndarray]:
        """Selected internal features (e.g. ``'a_val'``, ``'ptr_code0'``) at every position, as floats."""
        st = self._new_state()
        self._run(st, list(tokens))
        n = len(tokens)
        out = {}
        for name in names:
            if name not in st["cols"]:
                raise ValueError(f"unknown feature {name!r}")
            out[name] = np.array([float(v) for v in st["cols"][name][:n]])
        return out

    def generate(self, prompt: Sequence[str], max_new: int = 10_000) -> list[str]:
        """Greedy decoding from ``prompt`` until ``$`` (or ``max_new`` tokens); returns the new tokens."""
        prompt = list(prompt)
        if not prompt:
            raise ValueError("prompt must be non-empty")
        st = self._new_state()
        self._run(st, prompt)
        out: list[str] = []
        while len(out) < max_new:
            n = st["n"]
            tok = self._argmax(st, n - 1, n)[0]
            out.append(tok)
            if tok == "$":
                break
            self._run(st, [tok])
        return out

    def run(self, program, x: str, max_new: int = 10_000) -> str:
        """Run ``program`` on input ``x``: generate from the prompt, then read the answer out."""
        cot = self.generate(prompt_tokens(program, x), max_new=max_new)
        return readout(cot)


class _RowView:
    """Dict-like access to the rows ``s:e`` of the feature columns (what a Feature's fn sees)."""

    def __init__(self, cols: dict, s: int, e: int) -> None:
        self._cols, self._s, self._e = cols, s, e

    def __getitem__(self, name: str):
        return self._cols[name][self._s:self._e]


def first_mismatch(program, x: str, backend: FloatBackend | ExactBackend | None = None,
                   max_cot: int | None = None, max_steps: int = 100_000,
                   chunk: int = 64) -> tuple[int | None, int]:
    """Compare the Transformer's greedy predictions with the interpreter's CoT, teacher-forced.

    Returns ``(position, length)``: the sequence position whose predicted next token first differs from
    the trace (``None`` if none does, i.e. greedy decoding reproduces the CoT token for token), and the
    total length prompt + compared CoT. Checking all positions in one causal pass is equivalent to
    decoding: up to the first mismatch, the decoded prefix *is* the trace. The CoT is processed in
    chunks of ``chunk`` positions and the check stops at the first mismatch.
    """
    prompt = prompt_tokens(program, x)
    cot = run_ptm(program, x, max_steps=max_steps, max_cot=max_cot).cot
    if not cot:
        raise ValueError("the program produced no CoT tokens to compare")
    seq = prompt + cot
    model = FixedTransformer(backend)
    st = model._new_state()
    start = len(prompt) - 1
    done = 0
    while done < len(seq) - 1:
        end = len(prompt) if done == 0 else min(len(seq) - 1, done + chunk)
        model._run(st, seq[done:end])
        pred = model._argmax(st, done, end)
        for i in range(max(done, start), end):
            if pred[i - done] != seq[i + 1]:
                return i, len(seq)
        done = end
    return None, len(seq)


def precision_bound_bits(length) -> np.ndarray:
    r"""Bits suggested by the :math:`\Omega(I^{-5})` score-gap statement for total length :math:`I`:
    :math:`b = 5\log_2 I + 1` (a gap :math:`\ge 1/(2I^5)` survives rounding to :math:`2^{-b}`)."""
    length = np.asarray(length, dtype=float)
    if np.any(length < 1):
        raise ValueError("length must be >= 1")
    return 5 * np.log2(length) + 1
