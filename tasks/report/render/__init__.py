"""What the report writes, from the claim rows (``tasks.report.claims``) and the tables (``tasks.report.tables``):

- ``pages``: the claim page (the claim table, details, sections) and ``claims.md``, its Markdown;
- ``claims_html``: the same page as the self-contained ``claims.html``;
- ``answer``: the report's lead sentence and the verdict cells;
- ``figures``: the figures (loss curve, dose response, seeds, confusion, spans, sense separation, forest,
  reliability, leakage recall), PNG with pinned metadata;
- ``curve_figure``: the learning-curve figure of a finetune task;
- ``reviewer_figures``: expected validation performance against tuning budget per task, and the variance
  breakdown of each claim's difference;
- ``since``: "Since the last run", the claims compared with the previous run's, read back from MLflow;
- ``since_plot``: the claims' trend figure over earlier runs;
- ``summary``: ``metrics/summary.json``, the plot data under ``reports/plots`` and ``reports/summary.md``.
"""
