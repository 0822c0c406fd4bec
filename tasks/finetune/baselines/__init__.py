"""The finetune stage's baselines: what an encoder must beat before its number means anything.

- ``fitting``: which rows run (a comparator and a reference per baseline), fitting one (majority here), records;
- ``tfidf``: TF-IDF + logistic regression (cls), and the arms' input it reads;
- ``memorise``: each word's most frequent train tag (ner);
- ``crf``: a linear-chain CRF on hand-made word features (ner);
- ``grid``: the choice on dev of tfidf-lr's C and the CRF's c1/c2, a grid widened past an edge that wins;
- ``runs``: each row fitted once per seed on that seed's draw, its predictions written and its entry recorded.
"""
