"""The standalone draft's distillation by job: prompt corpora, teacher sampling, exported rounds, training and
evaluation (the command line is experiments/train_draft.py)."""
