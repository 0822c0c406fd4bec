"""The claims of a run and their evaluation: which claims there are, what their references read, the gates on
them, and one row per claim with its verdict (the statistics they use are ``tasks.report.stats``):

- ``grammar``: the claim and claims-file models, the metrics reader (``Metrics``, ``dig``), an arm's ``Sample``,
  ``NotRun`` and the reference grammar (its docstring);
- ``standard``: the standard claims generated for each task (``standard_claims.yaml``), then what
  ``reports/claims.yaml`` adds, overrides or drops;
- ``standard_claims.yaml``: the standard claims as templates (package data);
- ``switches``: which claims, arms and figures the params turn off, and the ``off (enable with <key>)`` reason;
- ``tasks_run``: the tasks a run fine-tuned, their kind module and headline metric, stale per-task metrics;
- ``arms/``: a reference resolved to the values of one arm (finetune runs with their test items, probe layers,
  ablation arms, pretraining seeds, calibration units);
- ``curve_claims``: the learning curve's references (``best-arm@n<docs>``, gaps) and the gap estimate;
- ``gates``: the floor, lineage and export gates and the optimiser steps of a finetune claim;
- ``confounders``: the measured confounders of a claim's arms;
- ``row``: ``Row``, one evaluated claim as the tables and figures show it;
- ``estimation``: a claim's arms and difference estimated from its samples, the verdict's tests and the MDE;
- ``evaluation``: one ``Row`` per claim (arms resolved, estimated, gated, noted), Holm within each family.
"""
