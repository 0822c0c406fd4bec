"""The statistics of the claim table, a library that knows nothing about claims (numbers in, numbers out):

- ``bootstrap``: the hierarchical bootstrap over seeds and test items, percentile intervals, p-values, Holm,
  TOST, Cohen's d;
- ``estimates``: an ``Estimate`` with its interval, the tests behind it (t, Welch, binomial, two proportions)
  and the verdict of a difference or a bound;
- ``power``: minimum detectable differences against a claim's margin at Holm's alpha, and the design (seeds x
  test items) that would decide it;
- ``components``: the seed, item and pretraining-seed variance components of a contrast of arms, and its t
  interval on Satterthwaite's degrees of freedom;
- ``probe_bootstrap``: the nested bootstrap of a sense-probe claim (words, then sentences);
- ``calibration``: ECE, the Brier score, reliability curves and their hierarchical bootstrap;
- ``improvement``: the probability of improvement P(X > Y) over per-run scores and its stratified bootstrap CI
  (Agarwal et al. 2021, rliable);
- ``aso``: Almost Stochastic Order's eps_min over per-run scores (del Barrio et al. 2018; Dror et al. 2019; deepsig's
  algorithm, Ulmer et al. 2022);
- ``evp``: expected validation performance, the expected best dev score of n configurations of a tuning grid
  (Dodge et al. 2019).

The Student-t interval (``t_interval``, behind ``estimates.mean_ci``) and the rounded Clopper-Pearson interval of
the stages' metrics (``clopper_pearson``) are the project's shared ones, in ``tasks.common.stats``;
``estimates.proportion_ci`` is the unrounded Clopper-Pearson interval of a claim's arm.
"""
