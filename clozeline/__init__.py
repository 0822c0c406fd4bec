"""clozeline's user-facing code: ``clozeline.predict`` runs an exported model exactly as it was evaluated.

- ``predict``: loads an export folder, registers the two pipeline tasks with transformers, and is the command line.
- ``baseline``: the TF-IDF + logistic-regression baseline export (skops), run through the same command line.
- ``encoding``: the evaluated model's input rebuilt for one document or one sentence (cut, tagger windows).
- ``entities``: words in, entities out, for the NER pipeline.
- ``errors``: ``ExportError``, raised by an export folder that does not load.

The pipeline itself lives in ``tasks/`` (the stages) and ``flows/`` (the Prefect flow).
"""
