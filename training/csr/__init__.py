"""Calibrated Self-Rewarding: search trees (generate), rewards (reward), pairs (pairs), the loop (loop)."""
