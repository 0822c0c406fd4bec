"""Code that several stages share, one module per concern (a stage's own parts live in its package):

- ``textnorm``: the text normalisation dedup and leakage both match on;
- ``minhash``: the MinHash kit of dedup and leakage (shingle hashes, permutations, signatures, LSH bands);
- ``unionfind``: disjoint sets (dedup clusters, split groups);
- ``alignment``: subword <-> word alignment and IOB2 (tokenize, finetune);
- ``parquet``: the per-source Parquet files stages hand on (split, leakage, tokenizer, tokenize);
- ``encoders``: tokenizers and the pretrained / adapted / random / reference encoders (tokenizer, tokenize,
  pretrain, finetune, probe);
- ``stats``: the one Student-t interval (finetune, report);
- ``optim``: AdamW parameter groups without decay on biases and LayerNorm (pretrain, finetune);
- ``imports``: a module's project imports, transitively, and their sha256 (pretrain's checkpoint fingerprint,
  the layout tests);
- ``provenance``: git commit, ``dvc.yaml`` and ``dvc.lock`` (the runner, report, the flow);
- ``nested``: dotted-key flattening of nested params and metrics (tracking, report);
- ``lineage``: the lineage fields of ``pretraining.json`` (the md5 of every text file a model and its ancestors
  trained on) and finding those files again (pretrain writes them, leakage audits against them);
- ``ioerrors``: I/O failures as one-line errors naming the file: a file that cannot be read (``reading``: the
  stage to rerun) and a write out of room (``writing``: the path being written; what was written removed);
- ``stamped``: cache tables stamped with the fingerprint of what decides their contents (the incremental
  dedup, leakage and tokenize stages).
- ``mlflow_ui``: which MLflow UI a link to a run opens (report's run links; ``make mlflow-ui``).
"""
