"""A claim's reference resolved to the values of one arm (a ``tasks.report.claims.grammar.Sample``):

- ``resolve``: the dispatch on the reference grammar, and the finetune, held-out, minimal-pair and leakage arms;
- ``probe_arms``: the sense-probe arms (per-word values, the cosines of the nested bootstrap);
- ``ablations``: the notes of a run fine-tuned from a pretraining ablation arm (``off`` when the arms are off);
- ``items``: the finetune predictions read back as per-item counts, the test-item slices (clean, overlapping,
  semantically clean);
- ``nested_seeds``: a finetune arm nested by pretraining seed (the Multi-Bootstrap's top level), and its notes;
- ``calibration_arms``: a run's calibration units from its prediction files, and its ECE, Brier and NLL estimates
  (raw and temperature-scaled);
- ``seed_scores``: a fine-tuning claim's per-run scores, and its probability of improvement and ASO on them;
- ``statements``: the resolved arms in words, a fine-tuning claim's statement with what was computed (arms,
  comparator, seeds, train size) and the baselines above the best arm.
"""
