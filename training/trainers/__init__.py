"""SFT and DPO-family trainers: `sft.run_sft(cfg)` and `dpo.run_dpo(cfg)` return the merged checkpoint dir."""
