"""The params sections of the stages that build the corpus, one module per stage (``params.yaml`` section =
module name): ``ingest``, ``dedup``, ``split``, ``leakage``, ``tokenizer``, ``tokenize``."""
