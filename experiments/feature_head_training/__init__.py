"""The EAGLE-style feature head's training by job: feature extraction and training (the command line is
experiments/train_feature_head.py)."""
