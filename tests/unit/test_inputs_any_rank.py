"""Token-aligned processor tensors of any rank (Mllama's cross_attention_mask is (batch, seq, images, tiles))
follow their row through re-batching: cut with it, padded with it, extended past the prompt."""
from __future__ import annotations


def test_higher_rank_token_aligned_tensor_follows_its_row():
    import torch

    from evalsuite.models.inputs import batch_rows, sequence_keys, split_sample

    enc = {"input_ids": torch.tensor([[0, 5, 6, 7]]), "attention_mask": torch.tensor([[0, 1, 1, 1]]),
           "cross_attention_mask": torch.tensor([[[[0]], [[1]], [[1]], [[0]]]]),  # (1, 4, 1, 1)
           "token_type_ids": torch.tensor([[0, 0, 1, 0]]), "pixel_values": torch.ones(1, 3, 2, 2)}
    assert sorted(sequence_keys(enc)) == ["cross_attention_mask", "token_type_ids"]
    ids, feats = split_sample(enc)
    assert ids == [5, 6, 7] and feats["cross_attention_mask"] == [[[1]], [[1]], [[0]]]
    short = {**feats, "cross_attention_mask": [[[1]], [[0]]]}  # another sample's prompt of 2 tokens
    out = batch_rows([ids + [8, 9], [5, 6]], [feats, short], pad_id=0, fill={"token_type_ids": 1}, side="left")
    assert out["cross_attention_mask"].shape == (2, 5, 1, 1)
    # row 0: its 3 prompt rows, then the last prompt row repeated for the 2 response tokens (generate's rule)
    assert out["cross_attention_mask"][0].flatten().tolist() == [1, 1, 0, 0, 0]
    # row 1: left padding is 0, then its own rows
    assert out["cross_attention_mask"][1].flatten().tolist() == [0, 0, 0, 1, 0]
    assert out["token_type_ids"][0].tolist() == [0, 1, 0, 1, 1]  # 2-D keys take the response fill
    cut = batch_rows([[5, 6]], [feats], pad_id=0, side="right")  # a row cut inside its prompt keeps its start
    assert cut["cross_attention_mask"][0].flatten().tolist() == [1, 1]
    assert out["pixel_values"].shape == (2, 3, 2, 2)
