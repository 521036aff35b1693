r"""A tiny AlgoPerf-style harness: workloads, targets, budgets, trials, studies.

The AlgoPerf protocol (Kasimbeg et al., ICLR 2025) in miniature:

* a **workload** fixes data, model, loss, validation metric and batch size;
* its **validation target** is set by target-setting runs: the best of a few tuned reference
  algorithms at ``step_hint`` steps, re-run on several seeds, target = median of their best
  validation metric;
* the **budget** is :math:`\lceil \tfrac43\,\text{step\_hint}\rceil` steps for external tuning and 3x
  that for self-tuning (v0.5 rules);
* a submission is told the external budget as its **horizon** (AlgoPerf's ``workload.step_hint``;
  the official target-setting runs schedule over ``0.75 * workload.step_hint``, which is this
  module's ``step_hint``), so a baseline's schedule ends at the budget, not at the target-setting
  horizon;
* a **trial** trains one configuration and evaluates every ``eval_every`` steps; its time to target
  is the step count (and the CPU seconds spent in training, evaluations excluded) of the first
  evaluation that reaches the target;
* a **study** is one set of trials (all search-space points in external tuning, a single run in
  self-tuning); per study the fastest trial counts, and :math:`t_{s,w}` is the median over studies.

Three workloads that need no download: ``digits_mlp`` (scikit-learn's bundled digits, an MLP
classifier), ``digits_ae`` (an MLP autoencoder on the same images, a reconstruction task) and
``illcond_clf`` (a synthetic classifier whose features are ill-conditioned *and rotated*, so that a
diagonal preconditioner cannot undo the conditioning).  ``variant="tanh"`` swaps the activation, a
held-out variant in the spirit of AlgoPerf's.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from .scoring import study_time_to_target, time_to_target
from .submissions import Submission

__all__ = [
    "WORKLOADS", "TrialResult", "Workload", "budget_steps", "make_workload", "median_times",
    "STUDY_STRIDE", "per_study_scores", "run_competition", "run_mini_competition", "study_ids",
    "targets_reached",
    "run_study", "run_trial", "set_target",
]

#: The workloads of the mini competition.
WORKLOADS = ("digits_mlp", "digits_ae", "illcond_clf")


@dataclass(frozen=True)
class Workload:
    """Data, model, loss and validation metric of one workload (the metric is minimised)."""

    name: str
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_val: torch.Tensor
    y_val: torch.Tensor
    layer_sizes: tuple[int, ...]
    task: str  # "classification" (cross-entropy, metric = error) or "reconstruction" (MSE)
    activation: str = "relu"
    batch_size: int = 64
    step_hint: int = 300
    eval_every: int = 25
    target: float | None = None

    @property
    def metric(self) -> str:
        return "error" if self.task == "classification" else "mse"

    def build_model(self, seed: int) -> nn.Module:
        """A fresh MLP with ``layer_sizes``, initialised from ``seed``."""
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        act = {"relu": nn.ReLU, "tanh": nn.Tanh}[self.activation]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(self.layer_sizes[:-1], self.layer_sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(self.layer_sizes) - 2:
                layers.append(act())
        model = nn.Sequential(*layers)
        torch.random.set_rng_state(gen_state)
        return model

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = model(x)
        if self.task == "classification":
            return nn.functional.cross_entropy(out, y)
        return nn.functional.mse_loss(out, y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> float:
        """Validation metric: error rate (classification) or mean squared error (reconstruction)."""
        out = model(self.X_val)
        if self.task == "classification":
            return float((out.argmax(1) != self.y_val).float().mean())
        return float(nn.functional.mse_loss(out, self.y_val))


def budget_steps(workload: Workload, ruleset: str = "external") -> int:
    """Step budget: ``ceil(4/3 * step_hint)`` (external), three times that (self-tuning, v0.5)."""
    if ruleset not in ("external", "self"):
        raise ValueError(f"ruleset must be 'external' or 'self', got {ruleset!r}")
    base = math.ceil(4 * workload.step_hint / 3)
    return base if ruleset == "external" else 3 * base


def make_workload(name: str, variant: str | None = None, step_hint: int = 300,
                  eval_every: int = 25) -> Workload:
    """Build one of :data:`WORKLOADS` (data fixed by the workload, not by the trial seed)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose from {WORKLOADS}")
    if variant not in (None, "tanh"):
        raise ValueError(f"variant must be None or 'tanh', got {variant!r}")
    if step_hint < 1 or eval_every < 1:
        raise ValueError("step_hint and eval_every must be >= 1")
    rng = np.random.default_rng(1234)
    if name.startswith("digits"):
        from sklearn.datasets import load_digits

        X = load_digits().data.astype(np.float32) / 16.0
        y = load_digits().target
        perm = rng.permutation(len(X))
        tr, va = perm[:1297], perm[1297:]
        Xt, Xv = torch.from_numpy(X[tr]), torch.from_numpy(X[va])
        if name == "digits_mlp":
            args = dict(y_train=torch.from_numpy(y[tr]).long(), y_val=torch.from_numpy(y[va]).long(),
                        layer_sizes=(64, 128, 128, 10), task="classification")
        else:
            args = dict(y_train=Xt, y_val=Xv, layer_sizes=(64, 32, 8, 32, 64), task="reconstruction")
        X_train, X_val = Xt, Xv
    else:  # illcond_clf: rotated, ill-conditioned Gaussian features with teacher labels
        n, d, k = 3000, 40, 5
        z = rng.standard_normal((n, d))
        teacher = rng.standard_normal((d, k))
        labels = (z @ teacher + 0.5 * rng.gumbel(size=(n, k))).argmax(1)
        scales = np.logspace(0, -2, d)
        Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        X = ((z * scales) @ Q.T).astype(np.float32)
        X_train, X_val = torch.from_numpy(X[:2000]), torch.from_numpy(X[2000:])
        args = dict(y_train=torch.from_numpy(labels[:2000]).long(),
                    y_val=torch.from_numpy(labels[2000:]).long(), layer_sizes=(d, 64, k),
                    task="classification")
    return Workload(name=name + (f"_{variant}" if variant else ""), X_train=X_train, X_val=X_val,
                    activation=variant or "relu", step_hint=step_hint, eval_every=eval_every, **args)


@dataclass(frozen=True)
class TrialResult:
    """One trial's evaluation log and its times to target (inf if the target was not reached)."""

    steps: np.ndarray
    seconds: np.ndarray
    metrics: np.ndarray
    steps_to_target: float
    seconds_to_target: float

    @property
    def best_metric(self) -> float:
        return float(np.min(self.metrics))


def run_trial(workload: Workload, submission: Submission, hparams: dict, seed: int,
              max_steps: int | None = None, stop_at_target: bool = True,
              horizon: int | None = None) -> TrialResult:
    """Train one configuration; evaluate every ``workload.eval_every`` steps (untimed).

    Time is counted in steps and in CPU seconds of the training steps only. With
    ``stop_at_target`` the run ends at the first evaluation that reaches ``workload.target``.
    ``horizon`` is the step count the submission is told to plan for (its schedule's end); by
    default the external budget, as AlgoPerf's ``workload.step_hint``.
    """
    if not isinstance(submission, Submission):
        raise TypeError(f"submission must be a Submission, got {type(submission).__name__}")
    max_steps = budget_steps(workload) if max_steps is None else int(max_steps)
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    horizon = budget_steps(workload) if horizon is None else int(horizon)
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    model = workload.build_model(seed)
    optimizer, scheduler = submission.init_optimizer(list(model.parameters()), hparams, horizon)
    gen = torch.Generator().manual_seed(seed + 7919)
    n = workload.X_train.shape[0]
    steps, seconds, metrics = [], [], []
    clock = 0.0
    for step in range(1, max_steps + 1):
        t0 = time.process_time()
        if submission.eval_mode:
            optimizer.train()
        idx = torch.randint(n, (workload.batch_size,), generator=gen)
        optimizer.zero_grad(set_to_none=True)
        loss = workload.loss(model, workload.X_train[idx], workload.y_train[idx])
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        clock += time.process_time() - t0
        if step % workload.eval_every == 0 or step == max_steps:
            if submission.eval_mode:
                optimizer.eval()
            value = workload.evaluate(model)
            if not np.isfinite(value):
                value = float("inf")
            steps.append(step)
            seconds.append(clock)
            metrics.append(value)
            if not np.isfinite(loss.item()):
                break  # diverged: the target can no longer be reached
            if stop_at_target and workload.target is not None and value <= workload.target:
                break
    steps_a, seconds_a, metrics_a = np.array(steps, float), np.array(seconds), np.array(metrics)
    if workload.target is None:
        tts = ttc = float("inf")
    else:
        tts = time_to_target(steps_a, metrics_a, workload.target)
        ttc = time_to_target(seconds_a, metrics_a, workload.target)
    return TrialResult(steps_a, seconds_a, metrics_a, tts, ttc)


def set_target(workload: Workload, candidates: Sequence[tuple[Submission, dict]],
               seeds: Sequence[int] = (0, 1, 2)) -> tuple[float, pd.DataFrame]:
    """Target setting: run every candidate for ``step_hint`` steps, scheduled over ``step_hint``
    (seed ``seeds[0]``), rerun the best on all ``seeds``; the target is the median of their best
    validation metric.

    Returns the target and a table of the candidates' best metrics.
    """
    if not candidates:
        raise ValueError("candidates must not be empty")
    wl = dataclasses.replace(workload, target=None)
    rows = []
    for sub, hp in candidates:
        res = run_trial(wl, sub, hp, seeds[0], max_steps=wl.step_hint, stop_at_target=False,
                        horizon=wl.step_hint)
        rows.append({"submission": sub.name, "lr": hp["lr"], "best": res.best_metric})
    table = pd.DataFrame(rows)
    best = int(table["best"].idxmin())
    sub, hp = candidates[best]
    finals = [run_trial(wl, sub, hp, s, max_steps=wl.step_hint, stop_at_target=False,
                        horizon=wl.step_hint).best_metric for s in seeds]
    return float(np.median(finals)), table


def run_study(workload: Workload, submission: Submission, ruleset: str, study: int,
              max_trials: int | None = None) -> dict:
    """One study: the search-space trials (external; the first ``max_trials`` points) or the single
    configuration (self-tuning). Returns the best trial's times to target in steps and seconds; the
    best trial is the one that reaches the target at the earliest evaluation.
    """
    if workload.target is None:
        raise ValueError("workload.target is None: set a target first")
    if ruleset not in ("external", "self"):
        raise ValueError(f"ruleset must be 'external' or 'self', got {ruleset!r}")
    if max_trials is not None and max_trials < 1:
        raise ValueError(f"max_trials must be >= 1 or None, got {max_trials}")
    configs = submission.search_space[:max_trials] if ruleset == "external" else (submission.self_tuning,)
    budget = budget_steps(workload, ruleset)
    results = [run_trial(workload, submission, hp, seed=1000 * study + j, max_steps=budget)
               for j, hp in enumerate(configs)]
    # as the official scoring: the trial that reaches the target at the earliest evaluation (first
    # such trial on ties) is the study's best, and both of its clocks are reported
    best = min(range(len(results)), key=lambda j: results[j].steps_to_target)
    return {"steps": results[best].steps_to_target, "seconds": results[best].seconds_to_target}


def run_competition(workloads: Sequence[Workload], submissions: Sequence[Submission], ruleset: str,
                    studies: Sequence[int], max_trials: int | None = None) -> pd.DataFrame:
    """Every submission on every workload, one study per entry of ``studies``.

    Returns a long table with columns submission, workload, study, steps, seconds (per-study
    best-trial times to target; inf = missed). Use :func:`median_times` for :math:`t_{s,w}`.
    """
    if ruleset not in ("external", "self"):
        raise ValueError(f"ruleset must be 'external' or 'self', got {ruleset!r}")
    rows = []
    for wl in workloads:
        for sub in submissions:
            for s in studies:
                rows.append({"submission": sub.name, "workload": wl.name, "study": s,
                             **run_study(wl, sub, ruleset, s, max_trials)})
    return pd.DataFrame(rows)


def median_times(results: pd.DataFrame, unit: str = "steps") -> pd.DataFrame:
    """:math:`t_{s,w}`: median over studies of the per-study best-trial time (submissions x workloads)."""
    if unit not in ("steps", "seconds"):
        raise ValueError(f"unit must be 'steps' or 'seconds', got {unit!r}")
    table = results.groupby(["submission", "workload"])[unit].apply(
        lambda v: study_time_to_target(v.to_numpy()))
    return table.unstack("workload")


def per_study_scores(results: pd.DataFrame, unit: str = "steps", tau_max: float = 4.0,
                     num_points: int = 100) -> pd.DataFrame:
    """Each study scored alone: :math:`B_s` of that study's best-trial times (submissions x studies).

    The competition's score uses the median time over studies (:func:`median_times`), one number per
    competition; scoring each study alone gives one score per study, the replicate on which a mean and
    its interval can be computed.
    """
    from .scoring import benchmark_score

    if unit not in ("steps", "seconds"):
        raise ValueError(f"unit must be 'steps' or 'seconds', got {unit!r}")
    studies = sorted(results["study"].unique())
    if not studies:
        raise ValueError("results has no study")
    return pd.DataFrame({s: benchmark_score(median_times(results[results["study"] == s], unit),
                                            tau_max=tau_max, num_points=num_points) for s in studies})


def targets_reached(results: pd.DataFrame) -> pd.DataFrame:
    """How many workloads' targets each submission reached in each study (submissions x studies)."""
    if results.empty:
        raise ValueError("results has no row")
    reached = results.assign(reached=np.isfinite(results["steps"].to_numpy(float)))
    return reached.groupby(["submission", "study"])["reached"].sum().unstack("study").astype(int)


#: Offset between the studies that one seed spawns (``seed``, ``seed + STUDY_STRIDE``, ...).
STUDY_STRIDE = 100_000


def study_ids(seeds: Sequence[int], studies_per_seed: int = 1) -> list[int]:
    """The studies of a run: ``seed + k * STUDY_STRIDE`` for every seed and ``k < studies_per_seed``."""
    if isinstance(studies_per_seed, bool) or not isinstance(studies_per_seed, int) or studies_per_seed < 1:
        raise ValueError(f"studies_per_seed must be an int >= 1, got {studies_per_seed!r}")
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0 or max(seeds) >= STUDY_STRIDE:
        raise ValueError(f"seeds must be distinct ints in [0, {STUDY_STRIDE}), got {seeds}")
    return [s + k * STUDY_STRIDE for s in seeds for k in range(studies_per_seed)]


def run_mini_competition(seeds: Sequence[int] = (0, 1, 2), step_hint: int = 100, eval_every: int = 10,
                         max_trials: int | None = 3, n_target_candidates: int = 2,
                         submissions: Sequence[str] | None = None,
                         workloads: Sequence[str] = WORKLOADS, studies_per_seed: int = 1) -> dict:
    """The whole mini competition: target setting, then both rulesets, ``studies_per_seed`` studies
    per seed (:func:`study_ids`).

    Targets come from NAdamW and SGD-Nesterov (the first ``n_target_candidates`` points of their
    search spaces) re-run once per study, on seeds ``10**9 + study``, so no competition trial reuses
    a target-setting run. Returns ``{"targets": {workload: target}, "target_runs": DataFrame,
    "external": DataFrame, "self": DataFrame}`` (the last two from :func:`run_competition`).
    """
    from .submissions import SUBMISSIONS

    if not seeds:
        raise ValueError("seeds must not be empty")
    studies = study_ids(seeds, studies_per_seed)
    names = list(SUBMISSIONS) if submissions is None else list(submissions)
    subs = [SUBMISSIONS[n] for n in names]
    setters = [SUBMISSIONS["nadamw"], SUBMISSIONS["sgd_nesterov"]]
    candidates = [(sub, hp) for sub in setters for hp in sub.search_space[:n_target_candidates]]
    wls, targets, runs = [], {}, []
    for name in workloads:
        wl = make_workload(name, step_hint=step_hint, eval_every=eval_every)
        target, table = set_target(wl, candidates, seeds=[10**9 + s for s in studies])
        targets[wl.name] = target
        runs.append(table.assign(workload=wl.name))
        wls.append(dataclasses.replace(wl, target=target))
    out = {"targets": targets, "target_runs": pd.concat(runs, ignore_index=True)}
    for ruleset in ("external", "self"):
        out[ruleset] = run_competition(wls, subs, ruleset, studies, max_trials)
    return out
