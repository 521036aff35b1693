"""The claims table of the chapter's reproduction page, built from its results.

Every row's kind is fixed here, before any data is seen; the criteria are the ones the reproduction
page pre-registers. "Every network" means every seed and replicate of the run; the paired intervals
are two-sided 95% t-intervals over the networks (:func:`~.network.paired_interval`).
"""

from __future__ import annotations

from companion_lib.common import ClaimTable

CHAPTER = "09-infomorphic-neurons"


def _f3(values) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


def _iv(iv) -> str:
    return f"{iv[0]:+.3f} [{iv[1]:+.3f}, {iv[2]:+.3f}]"


def claims_table(*, acc, tri, rp, uf, gap_small, red, ctx_iv, bp_iv, drops, sens_drops, sens_iv) -> ClaimTable:
    """The chapter's :class:`ClaimTable` (kinds and criteria fixed; checks computed from the arguments).

    ``tri``, ``rp``, ``uf``: accuracies per network; ``gap_small``: seed-mean heuristic minus random
    projection at N = 10 and 20; ``red``: label-redundant atoms per epoch; ``ctx_iv``, ``bp_iv``: paired
    intervals (trivariate - bivariate, backprop - trivariate, per network); ``drops``: accuracy drops
    per network from zeroing each atom of the 4-atom goal; ``sens_drops``: drops per network of each
    perturbation of the optimised goal, ``sens_iv`` their paired intervals.
    """
    n = len(acc)
    claims = ClaimTable(CHAPTER)
    claims.holds("Local PID goals alone train a classifier (trivariate heuristic goal)",
                 paper="Fig. 3: 0.934 (MNIST, N=100)", book=f"{tri.min():.3f} to {tri.max():.3f} ({n} networks)",
                 criterion="accuracy >= 0.80 at N=30, every network", check=bool((tri >= 0.80).all()))
    claims.holds("Infomorphic learning beats a random projection with the same readout",
                 paper="Fig. 3: 0.934 vs 0.806 (N=100)", book=f"min gap {(tri - rp).min():.3f}",
                 criterion="heuristic - random projection >= 0.04 at N=30, every network",
                 check=bool((tri - rp >= 0.04).all()))
    claims.holds("The gap to the random projection is large at small N", paper="Fig. 3: +0.46 (N=10), +0.37 (N=20)",
                 book=f"{gap_small[10]:.3f}, {gap_small[20]:.3f}", criterion="seed-mean gap >= 0.10 at N=10 and N=20",
                 check=bool(min(gap_small.values()) >= 0.10))
    gap_uf = tri - uf
    claims.does_not_reproduce(
        "Without feedforward-label redundancy, accuracy collapses by the note's margin",
        paper="cumulative zeroing: error 0.05 -> 0.2-0.9",
        book=f"gaps {gap_uf.min():.3f} to {gap_uf.max():.3f}, {int((gap_uf < 0.25).sum())} of {n} below 0.25",
        criterion="heuristic - unique-F-only >= 0.25, every network", check=bool((gap_uf >= 0.25).all()),
        reason="the gap's seed-to-seed spread straddles the margin (first run: one of three seeds at 0.246; "
               "twelve development seeds: 0.22 to 0.44); the unique-F hidden layer still passes "
               "label-relevant features to the output layer")
    others = drops.drop(columns="{F}{C}")
    fc_largest = drops["{F}{C}"].gt(others.max(axis=1))
    claims.does_not_reproduce(
        "{F}{C} is the indispensable atom of the 4-atom goal", paper="cumulative zeroing (Fig.): error jumps to ~0.2",
        book=f"drop {drops['{F}{C}'].mean():+.3f} vs others up to {others.mean().max():+.3f}; "
             f"largest on {int(fc_largest.sum())} of {n} networks",
        criterion="drop(zero {F}{C}) > drop(zero X) for every other atom X, on every network",
        check=bool(fc_largest.all()),
        reason="declared to hold in the first version; it failed on seed sets 11-13, 21-23 and 101-103. Zeroing "
               "{F}{C} costs about one to two percentage points, a little more than the other atoms on average, "
               "far from the paper's collapse: {F}{C}{L} also carries the label")
    claims.holds("Trained neurons accumulate label-redundant information", paper="atoms logged per epoch",
                 book=f"{red[0]:.3f} -> {red[-1]:.3f} bits",
                 criterion="Pi_{F}{C}{L} + Pi_{F}{C} grows by > 0.05 bits (mean over networks)",
                 check=bool(red[-1] - red[0] > 0.05))
    claims.does_not_reproduce(
        "Trivariate neurons (with lateral input) beat bivariate context neurons", paper="Fig. 3: 0.934 vs 0.925 (N=100)",
        book=_iv(ctx_iv), criterion="trivariate - bivariate at N=30: lower end of the paired 95% interval >= 0.01",
        check=bool(ctx_iv[1] >= 0.01),
        reason="digits at N <= 80 is too easy and small for the lateral advantage, which shows on MNIST at N >= 50")
    claims.does_not_reproduce(
        "Infomorphic learning matches backprop", paper="Fig. 3: 0.952 vs 0.954 (optimised goal, N=100)",
        book=_iv(bp_iv), criterion="backprop - heuristic at N=30: upper end of the paired 95% interval <= 0.02",
        check=bool(bp_iv[2] <= 0.02),
        reason="heuristic (not optimised) goal, 5-bin PID estimates from 256-sample batches, no goal search")
    worst = max(sens_iv, key=lambda c: sens_iv[c][2])
    claims.holds("The optimised goal is insensitive to small changes of its most sensitive coefficients",
                 paper="goal-sensitivity figure: drops <= 0.016 from 0.948",
                 book=f"largest upper end {sens_iv[worst][2]:+.3f} ({worst})",
                 criterion="each of the 5 perturbations: upper end of the paired 95% interval of the drop < 0.03",
                 check=bool(all(iv[2] < 0.03 for iv in sens_iv.values())))
    claims.does_not_reproduce(
        "Unique {F} +0.1 (the paper's most harmful perturbation) costs accuracy",
        paper="goal-sensitivity figure: 0.948 -> 0.932", book=_iv(sens_iv["{F} +0.1"]),
        criterion="drop of {F} +0.1 > 0 on every network", check=bool((sens_drops["{F} +0.1"] > 0).all()),
        reason="the paper's drops (0.007-0.016 on MNIST at N=100) are below what digits runs at N=30 resolve; "
               "the development sets gave paired intervals that include zero")
    claims.not_run("Goal sensitivity of the other coefficients and perturbations (19 x 5 in the paper)",
                   paper="goal-sensitivity figure: median 0.948",
                   reason="only the five perturbations the paper found most harmful are run; the full grid is "
                          "about twenty times as many networks")
    claims.not_run("Sparse lateral connectivity keeps large networks near backprop", paper="Fig. 3: 0.975 vs 0.980 (N=2000)",
                   reason="MNIST at N=2000 is beyond a 2-core CPU budget")
    return claims
