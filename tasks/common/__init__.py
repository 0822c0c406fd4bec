"""Code that several stages share, grouped by concern (a stage's own parts live in its package):

- ``matching/``: near-duplicate matching of dedup and leakage (normal form, MinHash, exact Jaccard, union-find);
- ``models/``: encoders, the kept vocabulary, optimiser groups (subword alignment and truncation are the
  shipped package's, ``clozeline``: training and serving cut and align text with the same code);
- ``runtime/``: the device, the garbage-collector pause, the Ray cluster;
- ``files/``: per-source Parquet, shards, one-line I/O errors, fingerprint-stamped caches;
- ``stats``: the one Student-t interval (finetune, report) and the exact binomial (Clopper-Pearson) interval
  (leakage's planted recall and review precision);
- ``imports``: a module's project imports, transitively, and their sha256 (pretrain's checkpoint fingerprint,
  the layout tests);
- ``provenance``: git commit, ``dvc.yaml`` and ``dvc.lock`` (the runner, report, the flow);
- ``deps``: the files a stage reads, as DVC deps;
- ``nested``: dotted-key flattening of nested params and metrics (tracking, report);
- ``pretraining_texts``: the lineage fields of ``pretraining.json`` (the md5 of every text file a model and its
  ancestors trained on) and finding those files again (pretrain writes them, leakage audits against them);
"""
