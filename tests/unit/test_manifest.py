"""Checkpoint manifests: written with sha256 per weight file; the checkpoint hash follows the bytes on disk."""
import json

from evalsuite.manifest import checkpoint_hash, read_manifest, write_manifest


def test_manifest_roundtrip_and_tamper(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"abc")
    write_manifest(ckpt, iteration=2, parent="/p/iter_1", method="csr", config={"beta": 0.1}, data_hash="d1")
    m = read_manifest(ckpt)
    # sha256("abc") is the well-known test vector ba7816bf...
    assert m["weights"]["model.safetensors"].startswith("ba7816bf8f01cfea")
    assert (m["iteration"], m["parent"], m["method"], m["config"], m["data_hash"]) == (
        2, "/p/iter_1", "csr", {"beta": 0.1}, "d1")
    assert m["code_version"] and m["created_at"]
    h1 = checkpoint_hash(ckpt)

    (ckpt / "model.safetensors").write_bytes(b"abd")
    assert checkpoint_hash(ckpt) != h1


def test_no_manifest(tmp_path):
    assert read_manifest(tmp_path) is None
    json.dumps(checkpoint_hash(tmp_path))  # hash of an empty weight set is still defined
