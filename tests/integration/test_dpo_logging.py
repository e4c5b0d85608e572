"""logging_steps only sets how often the trainer logs: the demo logs its DPO every few steps (curves with
tens of points) and that must leave the trained weights exactly as they were."""
import json

from safetensors.torch import load_file

from tests.integration.test_train import base_args, data  # noqa: F401  (the pairs fixture)
from training.train import main as train_main


def test_logging_steps_changes_the_log_not_the_weights(tiny_vlm_dir, world_dir, data, tmp_path, capsys):  # noqa: F811
    outs = {}
    for every in (1, 4):
        out = outs[every] = tmp_path / f"log{every}"
        assert train_main(base_args(tiny_vlm_dir, world_dir, data, out, "--max_steps", "4",
                                    "--logging_steps", str(every), "--lr_scheduler_type", "cosine")) == 0
        # stderr is no terminal here: the Trainer's bar is whole lines (evalsuite/progress.py), not tqdm's
        # redraws ("| 4/4 [00:01<00:00, ...]"), and the logged losses still show
        err = capsys.readouterr().err
        assert "train: 4/4 step (100%)" in err and "/4 [" not in err and "'loss': " in err, err[-2000:]
    rows = {k: [json.loads(x) for x in (o / "metrics.jsonl").read_text().splitlines()] for k, o in outs.items()}
    assert [len([r for r in v if "loss" in r]) for v in rows.values()] == [4, 1]
    a, b = (load_file(str(o / "merged" / "model.safetensors")) for o in outs.values())
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
