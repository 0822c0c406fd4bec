"""Near-duplicate matching that dedup and leakage share:

- ``textnorm``: the text normalisation both stages match on;
- ``confusables``: Unicode's confusable characters folded (UTS #39), for the leakage audit's normal form;
- ``minhash``: the MinHash kit (shingle hashes, permutations, signatures, LSH bands);
- ``pairjaccard``: the exact Jaccard of many candidate pairs (a numba kernel);
- ``unionfind``: disjoint sets (dedup clusters, split groups);
- ``compiled``: when the inner loops of ``pairjaccard``, ``unionfind`` and dedup's signing run as numba
  machine code.
"""
