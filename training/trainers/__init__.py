"""SFT and DPO-family trainers: `sft.run_sft(cfg)` and `dpo.run_dpo(cfg)` return the merged checkpoint dir
(with `save_merged false`: the adapter dir, or OUTPUT_DIR without one; common.py `finish_training`)."""
