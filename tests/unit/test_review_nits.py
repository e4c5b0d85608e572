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


class _FakeProc:
    """A vLLM worker process as VllmWorker sees it (poll, stdin, stdout): each next_logprobs request is
    answered with one row per prompt naming the replica and the prompt's first id; `log` records sends and
    reads across replicas."""

    def __init__(self, name, log):
        self.name, self.log, self.answers, self.checks = name, log, [], []
        self.stdin = SimpleNamespace(write=self._request, flush=lambda: None)
        self.stdout = SimpleNamespace(readline=self._answer)

    def poll(self):
        return None

    def _request(self, raw: bytes):
        import json

        req = json.loads(raw)
        assert req["op"] == "next_logprobs" and req["logprobs"] == 3
        self.log.append(("send", self.name, len(req["prompts"])))
        self.checks += [p["check"] for p in req["prompts"]]
        top = [[[p["ids"][0], -0.5], [self.name, -1.0]] for p in req["prompts"]]
        ran = [[p["ids"][0], 7, 7] for p in req["prompts"]] if req["prompt_ids"] else None
        self.answers.append(json.dumps({"id": req["id"], "top": top, "prompt_ids": ran}).encode() + b"\n")

    def _answer(self):
        self.log.append(("read", self.name))
        return self.answers.pop(0)


def test_vllm_replicas_next_logprobs_split_like_generate_ids(monkeypatch, tmp_path):
    """vllm.data_parallel_size=2: the group beam search's next_logprobs goes to both workers (contiguous
    parts, both sent before any answer is read), comes back in the prompts' order, and the expansion
    check still runs per replica; the beam path's running / info / max_logprobs are the replicas'."""
    from evalsuite.engines.vllm_process import PromptIds, VllmReplicas

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    spec = SimpleNamespace(options=SimpleNamespace(data_parallel_size=2, tensor_parallel_size=1, max_model_len=None))
    engine = VllmReplicas(spec, "ckpt", "bfloat16", "cuda", tmp_path / "vllm_worker.log")
    assert not engine.running
    engine.max_logprobs = 40
    assert [r.max_logprobs for r in engine.replicas] == [40, 40]
    log: list = []
    for i, r in enumerate(engine.replicas):
        r.proc, r._launched, r.info = _FakeProc(100 + i, log), True, {"vocab": 32, "max_logprobs": 40}
    assert engine.running and engine.info["vocab"] == 32
    from training.csr.config import TreeConfig
    from training.csr.search import SearchSpec
    from training.csr.vllm_expand import VllmSampler

    # the sampler's checks of the worker (training/csr/vllm_expand.py) read the replicas' limits
    need = VllmSampler(SimpleNamespace(worker=engine), TreeConfig(engine="vllm")).logprobs(SearchSpec(stop_ids=(9,)))
    assert 0 < need <= 32
    prompts = [PromptIds([k, 5], None, [k, 7, 7]) for k in range(5)]
    top = engine.next_logprobs(prompts, 3, check=True)
    assert top == [[[k, -0.5], [100 if k < 3 else 101, -1.0]] for k in range(5)]
    assert log == [("send", 100, 3), ("send", 101, 2), ("read", 100), ("read", 101)]
    assert engine.next_logprobs([], 3) == []
    # a refill call: only a node's first request carries its expansion, and only that one is asked back
    for r in engine.replicas:
        r.proc.checks.clear()
    engine.next_logprobs([PromptIds([k, 5], None, [k, 7, 7] if k == 3 else None) for k in range(5)], 3, check=True)
    assert [c for r in engine.replicas for c in r.proc.checks] == [False, False, False, True, False]

    from evalsuite.errors import RunFailure

    with pytest.raises(RunFailure, match="expanded a prompt to 3 tokens where the checkpoint's processor gives 2"):
        engine.next_logprobs([PromptIds([1, 5], None, [1, 7])], 3, check=True)


def test_the_worker_returns_the_expansion_only_of_the_prompts_that_ask(monkeypatch):
    """evalsuite/engines/vllm_worker.py next_logprobs (vLLM stood in): a beam row that does not carry its
    expansion gets None back instead of its ~700 expanded ids; a payload of an older client (no per-prompt
    flag) gets every prompt's, as before."""
    import sys
    import types

    from evalsuite.engines import vllm_worker

    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake)
    worker = object.__new__(vllm_worker.Worker)

    def generate(inputs, params, use_tqdm):
        return [SimpleNamespace(prompt_token_ids=[*i["prompt_token_ids"], 0],
                                outputs=[SimpleNamespace(logprobs=[{4: SimpleNamespace(logprob=-0.25)}])])
                for i in inputs]

    worker.llm = SimpleNamespace(generate=generate)
    req = {"prompts": [{"ids": [1], "image": None, "check": True}, {"ids": [2], "image": None, "check": False}],
           "logprobs": 3, "prompt_ids": True}
    out = worker.next_logprobs(req)
    assert out == {"top": [[[4, -0.25]], [[4, -0.25]]], "prompt_ids": [[1, 0], None]}
    for p in req["prompts"]:
        del p["check"]
    assert worker.next_logprobs(req)["prompt_ids"] == [[1, 0], [2, 0]]
    assert worker.next_logprobs({**req, "prompt_ids": False})["prompt_ids"] is None
