"""semantic: the embedding detector, for paraphrases no n-gram sees (``encoder``, ``method`` and ``store`` take
``SemanticParams``; ``texts``, which also reads the plants' seed, and the pass, ``audit``, the stage's
``LeakageParams``).

- ``windows``: texts as the encoder reads them, cut into token windows; ``Windows``, embedded windows of docs;
- ``method``: pair scores, known-clean pairs and the threshold chosen on dev (the method, in its docstring);
- ``search``: the nearest windows above a threshold, by shards of corpus windows merged on the driver, exact
  (blocked products) or by a faiss HNSW index;
- ``encoder``: the sentence encoder on its device, text to windows to unit vectors at fixed batch shapes;
- ``store``: the window vectors and text layouts kept across runs in ``<data>/leakage_embeddings``;
- ``texts``: what the pass embeds: the eval docs long enough, the sampled plants, the task train and kept corpus docs;
- ``review``: the review sample of review.jsonl (planted, known-clean and real flags) and its precision;
- ``audit``: the detector's pass in the stage: threshold on dev, the corpus scan, the review sample;
- ``cluster/``: ``engine: ray``: the windows embedded by a Ray Data actor pool, the corpus laid out, planned by key
  bucket and searched by Ray tasks; results equal ``engine: local``'s.
"""
