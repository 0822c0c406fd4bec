"""clozeline stages: `python -m tasks <stage>` runs one (see tasks/CONTRACTS.md and docs/layout.md).

The runner and the code the stages share:

- ``__main__``: ``python -m tasks <stage> [item]``, one stage run as DVC calls it (params, MLflow run, metrics);
- ``config/``: typed params, the only reader of ``params.yaml``;
- ``tracking/``: experiment tracking, the one package that imports MLflow;
- ``common/``: code several stages share, grouped by concern.

The stages, in ``dvc.yaml`` order:

- ``ingest/``: every source of ``ingest.sources`` read into the document row contract;
- ``dedup/``: exact and MinHash near-duplicate clusters over all sources at once;
- ``split/``: a split for every row, by group, so no group or near-duplicate cluster straddles two;
- ``leakage/``: every evaluation set audited for contamination, the leaking training docs removed or flagged;
- ``tokenizer``: a WordPiece vocabulary trained on the pretraining train split;
- ``tokenize/``: packed MLM blocks for pretraining, and one dataset per task and tokenizer;
- ``pretrain/``: masked-language-model pretraining, from scratch or continued from an encoder;
- ``finetune/``: the encoders fine-tuned per task over seeds, beside the baselines;
- ``probe/``: the layer-wise sense probe and the minimal pairs;
- ``export/``: the model chosen on dev as a standard Hugging Face model, re-scored as exported;
- ``report/``: the claim table;
- ``release/``: the export with its model card, registry version and alias gate.
"""
