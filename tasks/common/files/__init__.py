"""Files stages hand on and keep:

- ``parquet``: the per-source Parquet files stages hand on (split, leakage, tokenizer, tokenize);
- ``shards``: a stage's per-source Parquet output as one file or a folder of shards, and how readers list
  them;
- ``ioerrors``: I/O failures as one-line errors naming the file: a file that cannot be read (``reading``: the
  stage to rerun) and a write out of room (``writing``: the path being written; what was written removed);
- ``stamped``: cache tables stamped with the fingerprint of what decides their contents (the incremental
  dedup, leakage and tokenize stages).
"""
