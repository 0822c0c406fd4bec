"""dedup's compiled kernels (numba), loaded by ``tasks/dedup/signing.py`` on a corpus large enough to repay it.

Modules:

- ``scan``: a shard's normalized texts, word hashes and shingle sets from its UTF-8 bytes.
"""
