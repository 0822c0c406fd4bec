"""scan: one pass of the lexical detectors and the residual scan over every training doc, by four engines that
give the same ``TrainingScan`` byte for byte.

- ``local``: ``TrainingScan`` and the scan in this process;
- ``forked``: the local scan on ``num_proc`` forked processes over blocks of rows (``scan_locally``);
- ``ray_engine``: the scan on Ray Data blocks (``engine: ray``; Ray is imported when it runs);
- ``incremental``: the per-text cache in ``<data>/leakage_cache``, so a run scans only what it has not seen.
"""
