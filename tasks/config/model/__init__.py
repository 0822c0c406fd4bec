"""The params sections of the stages that train, evaluate and ship the model, one module per stage
(``params.yaml`` section = module name): ``pretrain``, ``finetune``, ``probe``, ``export``, ``release``,
``report``."""
