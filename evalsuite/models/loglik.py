"""Log-likelihood of a continuation given (image, prompt): what lmms-eval's loglikelihood requests ask.

`evalsuite.models.vlm` answers generation requests; multiple-choice / loglikelihood tasks need the
summed log-probability of a given continuation after the checkpoint's own chat prompt, and whether
greedy decoding would have produced exactly it. One request per forward pass: these tasks are rare
in the MME/POPE family and the prompt-prefix bookkeeping stays obvious.
"""
from __future__ import annotations

from evalsuite.types import GenRequest


def _continuation_ids(vlm, req: GenRequest, continuation: str):
    """Token ids of prompt+continuation and the index where the continuation starts."""
    from evalsuite.models.inputs import to_device
    from evalsuite.models.vlm import build_prompt, load_image

    image = load_image(req.image) if req.image is not None else None
    prompt = build_prompt(vlm, req.prompt, image is not None)
    images = [image] if image is not None else None
    if vlm.inputs.prompt_format == "paligemma":  # the continuation is the suffix after the encoded prefix
        from evalsuite.models.inputs import batch_rows, split_sample

        ids, feats = split_sample(vlm.inputs.encode([prompt], images))
        cont = vlm.tokenizer(continuation, add_special_tokens=False)["input_ids"]
        fill = {"token_type_ids": vlm.inputs.response_fill("token_type_ids")}
        batch = batch_rows([ids + cont], [feats], vlm.tokenizer.pad_token_id or 0, fill, side="right")
        return to_device(batch, vlm.device, vlm.model.dtype), len(ids)
    full = vlm.inputs.encode([prompt + continuation], images)
    n_prompt = vlm.inputs.encode([prompt], images)["input_ids"].shape[1]
    return to_device(full, vlm.device, vlm.model.dtype), n_prompt  # floating inputs in the model's dtype


def loglikelihood(vlm, requests: list[tuple[GenRequest, str]]) -> list[tuple[float, bool]]:
    """[(sum of log p(continuation tokens), continuation == greedy argmax)] in request order."""
    import torch

    out: list[tuple[float, bool]] = []
    for req, continuation in requests:
        inputs, start = _continuation_ids(vlm, req, continuation)
        ids = inputs["input_ids"][0]
        if start >= ids.shape[0]:  # empty continuation (or one the tokenizer merged into the prompt)
            out.append((0.0, True))
            continue
        with torch.inference_mode():
            logits = vlm.model(**inputs).logits[0].float()
        # logits at position t predict token t+1, so the continuation [start:] is read from [start-1:-1]
        logp = torch.log_softmax(logits[start - 1:-1], dim=-1)
        target = ids[start:]
        picked = logp.gather(1, target.unsqueeze(1)).squeeze(1)
        greedy = bool((logp.argmax(dim=-1) == target).all())
        out.append((float(picked.sum()), greedy))
    return out
