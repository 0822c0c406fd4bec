"""clozeline's user-facing code: ``clozeline.predict`` runs an exported model exactly as it was evaluated.

- ``predict``: loads an export folder into its pipeline, and is the command line (importing it registers the pipelines).
- ``pipelines``: the two pipeline tasks (text and token classification), registered with transformers.
- ``recipe``: the checked ``clozeline`` block of config.json and the evaluated model's head (pooling, logits).
- ``baseline``: the TF-IDF + logistic-regression baseline export (skops), run through the same command line.
- ``encoding``: the evaluated model's input rebuilt for one document or one sentence (cut, tagger windows).
- ``entities``: words in, entities out, for the NER pipeline.
- ``errors``: ``ExportError``, raised by an export folder that does not load.

The pipeline itself lives in ``tasks/`` (the stages) and ``flows/`` (the Prefect flow).
"""
