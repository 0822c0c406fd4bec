"""What the model stages share:

- ``encoders``: tokenizers and the pretrained / adapted / random / reference encoders (tokenizer, tokenize,
  pretrain, finetune, probe);
- ``vocab_ledger``: the kept vocabulary of scheduled runs;
- ``optim``: AdamW parameter groups without decay on biases and LayerNorm (pretrain, finetune).
"""
