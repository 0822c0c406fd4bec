"""cluster: the semantic pass with ``leakage.engine: ray``, whose driver holds no corpus text, window or vector.

- ``ray_engine``: ``RayEncoder``: windows embedded by a Ray Data actor pool (a GPU each where the cluster has
  them), the corpus searched one Ray task a shard; results equal ``engine: local``'s;
- ``corpus_layout``: the corpus windows laid out by Ray tasks, a row group each, sorted by key in the spill folder;
- ``corpus_keys``: the corpus windows by key bucket, one task a bucket: what is embedded, where each vector is
  searched and what is counted;
- ``spill``: the vectors kept in files on the workers' side, by key bucket and by search shard.
"""
