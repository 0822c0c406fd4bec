"""Fine-tuning the arms of a finetune task: the model, one seeded run, many runs, and their timing.

- ``model``: an encoder with a small head (two modes, three poolings), saved and loaded as safetensors;
- ``training``: one run (a job, a seed, a learning-rate multiplier): AdamW, early stopping on dev, one test pass;
- ``frozen``: a frozen classification arm's converged logistic-regression probe, folded into the head;
- ``sweep``: the per-arm learning-rate sweep on dev, worker processes and device slots, MLflow logging;
- ``operational``: latency, peak memory, parameters and size on disk of each arm's saved model.
"""
