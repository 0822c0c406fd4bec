"""The finetune stage's arms run again, beside the full-size runs of the first pretraining seed's model.

- ``at_train_sizes``: the learning curve, the ``curve_configs`` arms and the comparators at fewer train docs;
- ``from_pretraining_seeds``: the arms on our encoder from each further pretraining seed's model;
- ``from_ablations``: the ``ablation_config`` arm from each pretraining ablation arm's model.
"""
