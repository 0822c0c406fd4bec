"""clozeline's user-facing code: ``clozeline.predict`` runs an exported model exactly as it was evaluated.

- ``predict``: loads an export folder into its pipeline, and is the command line (importing it registers the pipelines).
- ``pipelines``: the two pipeline tasks (text and token classification), registered with transformers.
- ``recipe``: the checked ``clozeline`` block of config.json and the evaluated model's head (pooling, logits).
- ``baseline``: the TF-IDF + logistic-regression baseline export (skops), run through the same command line.
- ``encoding``: the evaluated model's input rebuilt for one document or one sentence (cut, tagger windows).
- ``entities``: words in, entities out, for the NER pipeline.
- ``errors``: ``ExportError``, raised by an export folder that does not load.
- ``alignment``: subword <-> word alignment and IOB2 tags (the tokenize and finetune stages use it too).
- ``truncation``: how a document or a pair is cut to the model's length (the finetune stage uses it too, so an
  export sees exactly the input the evaluated model saw).

The pipeline itself lives in ``tasks/`` (the stages) and ``flows/`` (the Prefect flow); both import this package,
which imports neither.
"""
