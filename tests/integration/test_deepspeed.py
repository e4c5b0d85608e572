"""The shipped DeepSpeed presets (configs/accelerate/zero2.yaml, zero3.yaml): accepted by accelerate's
DeepSpeed plugin as `accelerate launch --config_file` reads them, and a 2-step ZeRO-2 DPO on CPU.

DeepSpeed is the optional extra `deepspeed` (also in `test`, so CI runs these); without it they skip.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import free_port, launch
from tests.integration.test_train import base_args, data  # noqa: F401  (the module fixture)

REPO = Path(__file__).resolve().parents[2]
NO_DEEPSPEED = "DeepSpeed not installed: it is the optional extra `deepspeed` (pip install -e '.[deepspeed]')"


@pytest.mark.parametrize("preset,stage", [("zero2.yaml", 2), ("zero3.yaml", 3)])
def test_preset_is_accepted_by_accelerates_deepspeed_plugin(preset, stage):
    """What `accelerate launch --config_file PRESET` does before starting the ranks: validate the file,
    turn it into ACCELERATE_* variables, from which each rank's Accelerator builds a DeepSpeedPlugin."""
    pytest.importorskip("deepspeed", reason=NO_DEEPSPEED)
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DeepSpeedPlugin, patch_environment
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    preset_path = REPO / "configs" / "accelerate" / preset
    args = launch_command_parser().parse_args(
        ["--config_file", str(preset_path), "--main_process_port", str(free_port()), "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    assert args.use_deepspeed and (args.num_processes, args.mixed_precision) == (8, "bf16")
    fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)  # as launch_command sets it
    _, env = prepare_deepspeed_cmd_env(args)
    with patch_environment(**{k: v for k, v in env.items() if k.startswith("ACCELERATE_")}):
        plugin = DeepSpeedPlugin()
    zero = plugin.deepspeed_config["zero_optimization"]
    assert plugin.zero_stage == stage and zero["stage"] == stage
    assert zero["offload_optimizer"]["device"] == "none" and zero["offload_param"]["device"] == "none"
    assert plugin.zero3_init_flag is (stage == 3)
    if stage == 3:
        assert zero["stage3_gather_16bit_weights_on_model_save"] is True


PROBE = textwrap.dedent('''
    # training/train.py, recording which engine trained (the Trainer's wrapped model after train())
    import importlib, json, os, sys
    from pathlib import Path
    import transformers

    # DeepSpeed's CPU backend JIT-compiles a shared-memory allreduce op (g++ into ~/.cache/torch_extensions)
    # when the process group starts: about a minute of CPU in a fresh HOME, for an op GPUs never use; without
    # it the ranks reduce through gloo, as DeepSpeed does where the op is not available
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

    _train = transformers.Trainer.train

    def train(self, *args, **kwargs):
        out = _train(self, *args, **kwargs)
        engine = self.model_wrapped
        stage = engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else None
        Path(os.environ["PROBE_OUT"], f"engine.rank{os.environ['RANK']}.json").write_text(json.dumps(
            {"engine": type(engine).__name__, "stage": stage, "deepspeed": bool(self.is_deepspeed_enabled)}))
        return out

    transformers.Trainer.train = train
    sys.path.insert(0, sys.argv.pop(1))
    from training.train import main
    sys.exit(main(sys.argv[1:]))
''')


@pytest.mark.slow
def test_zero2_dpo_two_steps_on_cpu(tiny_vlm_dir, world_dir, data, tmp_path):  # noqa: F811
    """`accelerate launch --config_file configs/accelerate/zero2.yaml --num_processes 2 --mixed_precision no`
    on CPU: both ranks train through a DeepSpeedEngine at ZeRO stage 2, 2 steps, step-0 loss ln 2 = 0.693147
    (LoRA B = 0: policy == reference), and rank 0 writes the merged checkpoint."""
    pytest.importorskip("deepspeed", reason=NO_DEEPSPEED)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = tmp_path / "z2"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PROBE_OUT": str(tmp_path)}
    r = launch(lambda port: [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                             str(REPO / "configs" / "accelerate" / "zero2.yaml"), "--num_processes", "2",
                             "--mixed_precision", "no", "--main_process_port", str(port), str(probe), str(REPO),
                             *base_args(tiny_vlm_dir, world_dir, data, out)],
               capture_output=True, text=True, timeout=1200, cwd=tmp_path, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    engines = [json.loads((tmp_path / f"engine.rank{k}.json").read_text()) for k in (0, 1)]
    assert engines == [{"engine": "DeepSpeedEngine", "stage": 2, "deepspeed": True}] * 2
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in rows if "loss" in x]
    assert len(losses) == 2 and losses[0] == pytest.approx(0.6931472, rel=1e-5)
    assert [x["epoch"] for x in rows if "loss" in x] == [0.5, 1.0]  # 8 pairs, 2 ranks x batch 2 per step
    assert json.loads((out / "merged" / "evalsuite.json").read_text())["parent"] == str(tiny_vlm_dir)
