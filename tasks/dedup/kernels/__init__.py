"""dedup's compiled kernels (numba), loaded by ``tasks/dedup/signing.py`` on a corpus large enough to repay it.

Modules:

- ``fold``: the texts' ``textnorm.normalize`` as UTF-8 bytes, by a per-code-point table where it gives the same.
- ``scan``: a shard's normalized texts, word hashes and shingle sets from its UTF-8 bytes.
"""
