"""lexical: the detectors that compare words (each takes ``LexicalParams``, the residual check ``ResidualParams``).

- ``words``: ``tokenize`` (the words every lexical detector reads) and ``Side`` (docs' words and word hashes);
- ``blocks``: training docs cut into blocks of whole docs, so a scan's memory is bounded per process;
- ``shingles``: the screen in front of the detectors (which docs and windows share a k-gram with an eval doc);
- ``detectors``: n-gram overlap, whole-doc equality and MinHash LSH (docs, passages); ``detect`` runs them all;
- ``substitution``: word n-grams equal but for a few substituted words;
- ``residual``: an independent, looser check (pooled word 8-gram coverage) of the corpus after the action;
- ``cache_key``: the params key of the caches that keep lexical and residual results across runs.
"""
