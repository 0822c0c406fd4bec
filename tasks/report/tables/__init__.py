"""The report's tables beside the claim rows, each built from the metrics with ``tasks.report.stats`` and
rendered by ``tasks.report.render``:

- ``slices``: per-slice and per-label tables of the fine-tuned arms (clean, overlapping, per class or type);
- ``evidence``: the minimal-pair, calibration and inference-cost tables and the reliability curves;
- ``exported_models``: the exported models re-scored as shipped, and the export's row of the cost table;
- ``leakage_recall``: the leakage audit's recall against edit strength and the semantic detector's review;
- ``ledger``: the experiment ledger, built from the params ``dvc.lock`` recorded for each stage.
"""
