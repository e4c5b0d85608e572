"""Small review fixes, each with its own check: a moved key inside CSR's `eval:` names the top-level
spelling, a command-line `train.image_aspect` is reported as such, lmms generate_until answers are counted
per request without lmms-eval's rank padding."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from evalsuite.errors import UserError

REPO = Path(__file__).resolve().parents[2]
CSR = REPO / "configs" / "csr.yaml"


def test_csr_eval_system_prompt_names_the_top_level_inputs_in_one_line_exit_2(tmp_path, capsys):
    """eval: {system_prompt: X} in a CSR preset: the one line names `inputs.system_prompt` (the loop hands
    the top-level inputs to the evaluation and refuses eval.inputs), not eval.inputs.system_prompt."""
    import yaml

    from training.train import main

    preset = yaml.safe_load(CSR.read_text())
    preset["eval"] = {"tasks": ["pope"], "data_root": str(tmp_path), "system_prompt": "Be brief."}
    path = tmp_path / "csr_eval_prompt.yaml"
    path.write_text(yaml.safe_dump(preset))
    assert main(["--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{path}: eval.system_prompt: renamed inputs.system_prompt (YAML: inputs: {{system_prompt: ...}}; " \
           "command line: inputs.system_prompt=VALUE)" in err, err
    assert "eval.inputs" not in err

    # the evaluation config on its own still names its own section's spelling
    from evalsuite.config import build
    from evalsuite.run_config import EvalConfig

    with pytest.raises(UserError, match=r"^x: system_prompt: renamed inputs.system_prompt "):
        build(EvalConfig, {"system_prompt": "Be brief."}, "x")


def test_csr_train_image_aspect_error_names_the_command_line(capsys):
    from training.csr.config import load_config
    from training.train import main

    with pytest.raises(UserError, match=r"^command line: train.image_aspect: 'stretch' is not one of crop, pad$"):
        load_config(CSR, ["train.image_aspect=stretch"])
    assert main(["--config", str(CSR), "train.image_aspect=stretch", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().endswith("error: command line: train.image_aspect: 'stretch' is not "
                                                    "one of crop, pad")


def test_csr_train_image_aspect_error_in_the_preset_names_the_preset(tmp_path):
    import yaml

    from training.csr.config import load_config

    preset = yaml.safe_load(CSR.read_text())
    preset["train"]["image_aspect"] = "stretch"
    path = tmp_path / "bad_aspect.yaml"
    path.write_text(yaml.safe_dump(preset))
    with pytest.raises(UserError, match=rf"^{path}: train.image_aspect: 'stretch' is not one of crop, pad$"):
        load_config(path, ["iterations=1"])


class _Backend:
    device, fingerprint = "cpu", "fake-model"

    def __init__(self, answers):
        self.answers = answers   # prompt -> answer

    def generate(self, requests, gen):
        return [self.answers[r.prompt] for r in requests]

    def loglikelihood(self, pairs):
        return [(-1.0, True) for _ in pairs]


def _req(doc_id, prompt, padding=False, task="t"):
    metadata = {"task": task, "doc_id": doc_id, "repeats": 1, "split": "test"}
    if padding:
        metadata["__padding_only__"] = True
    return SimpleNamespace(args=(prompt, {"max_new_tokens": 4}, [object()], doc_id, task, "test"),
                           metadata=metadata)


def test_lmms_empty_answers_are_counted_per_request_without_rank_padding():
    """Doc 0 has two generate_until requests (one empty: counted, not hidden by the later non-empty one),
    doc 1 is asked twice (repeats: two answers), and two padding clones (lmms-eval's evaluator.py evens
    the ranks' work with copies of the last request; task.py gives an empty rank doc 0) are not counted:
    lmms-eval never scores them, and their doc is another rank's or already counted here."""
    from evalsuite.lmms.backend import EvalsuiteLMM

    lm = EvalsuiteLMM(backend=_Backend({"q0a": "", "q0b": "yes", "q1": "", "q2": "no"}), batch_size=2)
    lm.task_dict = {"t": {"test": {0: {}, 1: {}, 2: {}}}}
    reqs = [_req(0, "q0a"), _req(0, "q0b"), _req(1, "q1"), _req(1, "q1"), _req(2, "q2"),
            _req(2, "q2", padding=True), _req(0, "q0a", padding=True)]
    assert lm.generate_until(reqs) == ["", "yes", "", "", "no", "no", ""]
    assert lm.answer_counts() == {"t": {"total": 5, "empty": 3, "sample": (0, "q0a", "")}}
    lm.reset_counts()
    assert lm.generate_until([_req(0, "q0b", padding=True)]) == ["yes"]
    assert lm.answer_counts() == {}   # a rank that only padded answered nothing of its own
