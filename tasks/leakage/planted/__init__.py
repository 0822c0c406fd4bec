"""planted: perturbed copies of every eval doc, at growing edit strength, that measure each detector's recall.

- ``variants``: the ladder of variants (format, replaced words, synonyms, shuffled sentences, quoted fragments)
  and the copies built from every eval doc (``make``);
- ``recall``: which lexical methods find each copy, and the ``planted`` metrics (recall, Clopper-Pearson intervals);
- ``synonyms``: WordNet 3.0 synonyms, read from its data files;
- ``filler``: unrelated pretraining text on a consistent-hashing ring, read from a point of each copy's own;
- ``cache``: which lexical methods find each copy, kept across runs in ``<data>/leakage_cache/plants.parquet``.
"""
