"""Training side of evalsuite: `python training/train.py --method sft|dpo|csr|demo ...`."""
