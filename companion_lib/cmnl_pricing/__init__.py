r"""Dynamic assortment selection and pricing under censored MNL feedback (Kim and Oh, ICLR 2025).

*Dynamic Assortment Selection and Pricing with Censored Preference Feedback*, Jung-hun Kim and
Min-hwan Oh, https://openreview.net/forum?id=DOXnqYLCcd (arXiv 2504.02324). This package is an
independent re-implementation; the official code (no licence) was read, not copied.

The censored multinomial logit (C-MNL) model. Product :math:`i\in[N]` has known features
:math:`x_i, w_i\in\mathbb R^d` and unknown parameters :math:`\theta_v,\theta_\alpha\in\mathbb R^d`:

.. math::  v_i = x_i^\top\theta_v \ \text{(valuation)}, \qquad
           \alpha_i = w_i^\top\theta_\alpha \ \text{(price sensitivity)}.                     (1)

The seller offers an assortment :math:`S`, :math:`|S|\le K`, at prices :math:`p`. The buyer drops every
product priced above its valuation, :math:`\tilde S=\{i\in S: p_i\le v_i\}`, and buys :math:`i\in\tilde S`
or nothing (:math:`i=0`) with

.. math::  P(i\mid S,p) = \frac{e^{v_i-\alpha_i p_i}}{1+\sum_{j\in\tilde S} e^{v_j-\alpha_j p_j}}.   (2)

Expected revenue :math:`R(S,p)=\sum_{i\in\tilde S} p_i P(i\mid S,p)` (3); regret
:math:`\mathrm{Reg}(T)=\sum_t R(S^*,p^*)-R(S_t,p_t)` (4). With :math:`0\le v_i,\alpha_i\le 1`,
:math:`\partial R/\partial p_i = P(i)\,(1-\alpha_i(p_i-R))>0` on :math:`[0,v_i]`, so :math:`p^*=v` and
:math:`S^*` maximises (3) at :math:`p=v` (5).

The learner writes the utility as :math:`z_i^\top\theta` with :math:`z_i=[x_i;-p_iw_i]`,
:math:`\theta=[\theta_v;\theta_\alpha]` (6), and keeps an online-Newton estimate :math:`\hat\theta_t` with
Gram matrices :math:`V_t` (in :math:`z`) and :math:`V^v_t` (in :math:`x`) (7). Its prices are lower
confidence bounds of the valuations, :math:`p_i=\max(x_i^\top\hat\theta_v-\sqrt C\beta\lVert x_i\rVert_{(V^v)^{-1}},0)`
(8), so offered products are almost never censored and the feedback is a plain MNL. The assortment is
chosen optimistically, by upper confidence bounds (UCBA-LCBP, Algorithm 1) or by the maximum of
:math:`M` Thompson samples (TSA-LCBP, Algorithm 2) (9).

The package, one file per part: :mod:`.model` (eqs. (1)-(5), the environment and the oracle),
:mod:`.estimation` (eqs. (6)-(7)), :mod:`.policies` (eqs. (8)-(9), Algorithms 1-2 and the baselines) and
:mod:`.experiment` (simulation, regret curves and their statistics, timing), with :mod:`.batch` running the
same policies on many markets at once.

Conventions in code: products are indexed ``0..N-1``; an assortment is a boolean mask of shape
``(N,)`` (or ``(M, N)`` for many); a purchase is an int, ``-1`` meaning "no purchase".
"""

from .batch import BATCHED_POLICIES, batched_regret_curves
from .estimation import OnlineMNLEstimator, fit_mnl_mle, mnl_fisher
from .experiment import (POLICY_NAMES, curve_statistics, growth_ratio, loglog_slope, make_policy, market_slopes,
                         regret_curves, seconds_per_round, simulate)
from .model import (CensoredMNLEnv, all_assortments, best_assortment, censored_choice_probabilities, expected_revenue,
                    kappa, make_environment, oracle, revenue_price_gradient, topk_assortment)
from .policies import (CensoringUnawarePricing, ExploreThenCommit, ExploreThenCommitLCB, Policy, TSLCBPolicy, UCBLCBPolicy,
                       thompson_sample_count)

__all__ = [
    "CensoredMNLEnv", "make_environment", "censored_choice_probabilities", "expected_revenue",
    "revenue_price_gradient", "all_assortments", "best_assortment", "topk_assortment",
    "oracle", "kappa", "mnl_fisher", "OnlineMNLEstimator", "fit_mnl_mle", "thompson_sample_count",
    "Policy", "UCBLCBPolicy", "TSLCBPolicy", "ExploreThenCommit", "ExploreThenCommitLCB", "CensoringUnawarePricing",
    "POLICY_NAMES", "make_policy", "simulate", "regret_curves", "growth_ratio", "loglog_slope",
    "curve_statistics", "market_slopes", "seconds_per_round", "batched_regret_curves", "BATCHED_POLICIES",
]
