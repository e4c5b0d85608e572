"""Seeded generators of hostile variants of every user-facing input (tests/fuzz/test_fuzz.py).

Each generator takes a `random.Random` and returns one variant (bytes): a valid seed document of that
kind with 0-4 mutations drawn from the ways files go wrong or are crafted: truncation, non-UTF-8 and
NUL bytes, a slice repeated, deep nesting, huge numbers, long strings, wrong types for known fields,
YAML alias bombs and recursive aliases, BOMs, flipped bytes. Sizes stay under a few MB so a variant
exercises the limits without the generator itself being the cost.
"""
from __future__ import annotations

import json
import random
import struct

POOL = [b"\xff", b"\xfe", b"\x00", b"\x80", b"\xc0\xaf", b"\n", b"[", b"{", b"]", b"}", b'"', b"'", b"&a ", b"*a",
        b"!!python/object:os.system", b"%", b":", b"- ", b"\t", b"\\", b"\r", b"<<: ", b"~", b"1e999", b"-1", b"null"]


def alias_bomb(rng: random.Random) -> str:
    levels, width = rng.randint(3, 10), rng.randint(2, 12)
    names = [f"a{i}" for i in range(levels)]
    parts = [f"&{names[0]} [{', '.join(['lol'] * width)}]"]
    for prev, cur in zip(names, names[1:]):
        parts.append(f"&{cur} [{', '.join(['*' + prev] * width)}]")
    return "[" + ", ".join(parts) + "]"


def deep(rng: random.Random, open_: str = "[", close: str = "]") -> str:
    n = rng.choice([70, 200, 1000, 5000, 50_000, 100_000])
    return open_ * n + close * n


def _bytes_mutation(rng: random.Random, data: bytes) -> bytes:
    kind = rng.randrange(9)
    pos = rng.randint(0, len(data))
    if kind == 0:                                     # torn: cut anywhere
        return data[:pos]
    if kind == 1:                                     # junk bytes inserted
        return data[:pos] + b"".join(rng.choice(POOL) for _ in range(rng.randint(1, 12))) + data[pos:]
    if kind == 2 and data:                            # a slice repeated many times
        a = rng.randint(0, len(data) - 1)
        piece = data[a:a + rng.randint(1, 64)]
        return data[:pos] + piece * rng.randint(2, max(2, 2_000_000 // max(1, len(piece)))) + data[pos:]
    if kind == 3:                                     # deep nesting spliced in
        return data[:pos] + deep(rng, *rng.choice([("[", "]"), ("{", "}"), ('{"a":', "}")])).encode() + data[pos:]
    if kind == 4:                                     # huge number
        return data[:pos] + (b"9" * rng.choice([20, 400, 5000, 50_000])) + data[pos:]
    if kind == 5:                                     # long string
        return data[:pos] + b'"' + b"x" * rng.choice([1000, 100_000, 2_000_000]) + b'"' + data[pos:]
    if kind == 6 and data:                            # flipped bytes
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 7:                                     # BOM / UTF-16
        return rng.choice([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"]) + data
    return data + rng.choice(POOL) * rng.randint(1, 1000)


def mutate(rng: random.Random, data: bytes, structural=None) -> bytes:
    for _ in range(rng.choice([0, 1, 1, 2, 3, 4])):   # 1 in 6 left valid: the accepted path is fuzzed too
        if structural is not None and rng.random() < 0.5:
            data = structural(rng, data)
        else:
            data = _bytes_mutation(rng, data)
    return data


# ------------------------------------------------------------------------------------------ YAML
EVAL_FIELDS = {"ckpt": "x", "tasks": "[caption]", "data_root": "/tmp", "label": "'run A'", "limit": "2",
               "batch_size": "1", "seed": "0", "device": "cpu", "caption": "{prompt: 'Describe.'}", "gen": "{max_new_tokens: 8}", "rerun": "false",
               "inputs": "{system_prompt: 'Be brief.'}"}
TRAIN_FIELDS = {"method": "dpo", "loss_type": "sigmoid", "beta": "0.1", "lora_r": "8", "learning_rate": "0.01",
                "max_steps": "2", "lora_target_modules": "auto", "per_device_train_batch_size": "2",
                "save_strategy": '"no"', "report_to": "none", "use_cpu": "true", "seed": "0",
                "output_dir": "/nonexistent/out"}
HOSTILE_VALUES = [lambda r: alias_bomb(r), lambda r: deep(r), lambda r: deep(r, "{a: ", "}"),
                  lambda r: "!!python/object/apply:os.system ['true']", lambda r: "&x [*x]",
                  lambda r: "1e400", lambda r: "-" + "9" * r.choice([30, 5000]), lambda r: "'" + "y" * 1_000_000 + "'",
                  lambda r: "{" + ", ".join(f"k{i}: {i}" for i in range(r.choice([10, 5000]))) + "}",
                  lambda r: "[" + ", ".join(["x"] * r.choice([3, 100_000])) + "]", lambda r: "null", lambda r: "~",
                  lambda r: "!!binary aGVsbG8=", lambda r: "2001-12-14", lambda r: ".nan", lambda r: "yes",
                  lambda r: "{<<: {a: 1}}", lambda r: "'\\xff'", lambda r: "\"\\udcff\"", lambda r: "*undefined",
                  lambda r: "? complex\n: key", lambda r: "|\n  multi\n  line", lambda r: "0x1F", lambda r: "0o777"]


def yaml_doc(rng: random.Random, fields: dict[str, str]) -> bytes:
    keys = list(fields)
    rng.shuffle(keys)
    keys = keys[: rng.randint(3, len(keys))]
    bad = set(rng.sample(keys, rng.choice([0, 0, 1, 1, 2])))   # about 40% of documents are clean
    lines = [f"{k}: {rng.choice(HOSTILE_VALUES)(rng) if k in bad else fields[k]}" for k in keys]
    if rng.random() < 0.15:
        lines.append(f"{rng.choice(['unknown', 'a', '__class__', 'x' * 300])}: {rng.choice(HOSTILE_VALUES)(rng)}")
    text = "\n".join(lines).encode()
    return mutate(rng, text) if rng.random() < 0.3 else text


def eval_yaml(rng: random.Random) -> bytes:
    return yaml_doc(rng, EVAL_FIELDS)


def train_yaml(rng: random.Random) -> bytes:
    return yaml_doc(rng, TRAIN_FIELDS)


# ------------------------------------------------------------------------------------------ JSON
def _json_structural(rng: random.Random, data: bytes) -> bytes:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return data
    hostile = [[], 1, "x", None, {"a": 1}, [1, 2], -1, 10**30, 1e308, "\udcff", {"": {}}]
    if isinstance(doc, dict) and doc:
        k = rng.choice(list(doc))
        doc[k] = rng.choice(hostile)
        if rng.random() < 0.3:
            del doc[k]
    elif isinstance(doc, list) and doc:
        doc[rng.randrange(len(doc))] = rng.choice(hostile)
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")


CONFIG_JSON = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
               "text_config": {"model_type": "llama", "hidden_size": 32}, "vision_config": {"model_type": "clip_vision_model"},
               "image_token_index": 32000, "torch_dtype": "float32"}


def config_json(rng: random.Random) -> bytes:
    return mutate(rng, json.dumps(CONFIG_JSON).encode(), _json_structural)


def safetensors_file(rng: random.Random) -> bytes:
    header = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
              "b": {"dtype": "F16", "shape": [4], "data_offsets": [16, 24]}, "__metadata__": {"format": "pt"}}
    data = b"\0" * 24
    raw = json.dumps(header).encode()
    kind = rng.randrange(4)
    if kind == 0:       # the header as JSON mutated
        raw = mutate(rng, raw, _safetensors_structural)
    elif kind == 1:     # the whole file mutated, length prefix included
        return mutate(rng, struct.pack("<Q", len(raw)) + raw + data)
    elif kind == 2:     # a lying length
        return struct.pack("<Q", rng.choice([0, 1, len(raw) - 1, len(raw) + 1, 2**63, 2**64 - 1])) + raw + data
    else:
        raw = _safetensors_structural(rng, raw)
    if rng.random() < 0.3:
        data = data[: rng.randint(0, len(data))] if rng.random() < 0.5 else data + b"\0" * rng.randint(1, 64)
    return struct.pack("<Q", len(raw)) + raw + data


def _safetensors_structural(rng: random.Random, raw: bytes) -> bytes:
    try:
        h = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    if not isinstance(h, dict) or not h:
        return raw
    name = rng.choice([k for k in h] + ["__metadata__"])
    entry = h.get(name) if isinstance(h.get(name), dict) else {}
    choices = [
        lambda: [], lambda: 1, lambda: {"dtype": "F32"},
        lambda: {**(entry or {}), "shape": [10**9, 10**9]}, lambda: {**(entry or {}), "shape": [-1]},
        lambda: {**(entry or {}), "shape": "x"}, lambda: {**(entry or {}), "dtype": rng.choice(["EVIL", 1, None, "F8_E4M3"])},
        lambda: {**(entry or {}), "data_offsets": rng.choice([["a", "b"], [0, -5], [16, 0], [0, 2**70], [0], [8, 24], [0, 16]])},
        lambda: {"x": 1}, lambda: {str(i): str(i) for i in range(50)},
    ]
    h[name] = rng.choice(choices)()
    return json.dumps(h).encode()


def footer(rng: random.Random) -> bytes:
    meta = {"run_id": "r1", "ckpt": "/c", "ckpt_hash": "h", "samples_file": "r1-abc.parquet",
            "tasks": {"caption": {"version": "1", "eval_key": "k", "config": {}, "num_samples": 1}},
            "config": {"label": "x"}, "data_root": None, "created_at": "2026-01-01T00:00:00+00:00"}
    def structural(rng, data):
        out = _json_structural(rng, data)
        if rng.random() < 0.3:
            try:
                d = json.loads(out)
                if isinstance(d, dict):
                    d["samples_file"] = rng.choice(["../../x.parquet", "/etc/passwd", "", "a/../../b", 1])
                    out = json.dumps(d).encode()
            except (ValueError, RecursionError):
                pass
        return out
    return mutate(rng, json.dumps(meta).encode(), structural)


# -------------------------------------------------------------------------------- records files
def captions(rng: random.Random) -> bytes:
    rows = [{"image_id": i, "caption": "A dog on a red sofa."} for i in range(rng.randint(1, 5))]
    text = "\n".join(json.dumps(r) for r in rows).encode()
    return mutate(rng, text, lambda r, d: d.replace(b'"image_id": 0', rng.choice(
        [b'"image_id": "x"', b'"image_id": -1', b'"image_id": 1e999', b'"image_id": [0]', b'"image_id": true',
         b'"image_id": 99999999999999999999999'])))


def pairs(rng: random.Random) -> bytes:
    rows = [{"image": f"{i}.png", "chosen": "a dog", "rejected": "a cat"} for i in range(rng.randint(1, 4))]
    return mutate(rng, json.dumps(rows).encode(), _json_structural)


# image fields as files carry them wrong or crafted: other types, empty, NUL and other control characters,
# escapes, huge names, a parquet-like struct with bad members; null is the valid text-only row
IMAGE_VALUES = [123, -1, 1.5, True, [], ["a.png"], {}, {"path": 5}, {"bytes": "x"}, {"path": None, "bytes": None},
                "", " ", "a\x00b.png", "a\x1b[31m.png", "a\rb.png", "a\nb.png", "\x7f.png", "\u0085.png", "../../etc/passwd",
                "/abs/x.png", "x" * 5000, "ok.png", None, "caf\u00e9.png", "\u202e.png"]


def training_rows(rng: random.Random) -> bytes:
    """Rows of every training format (plain_dpo, vlquery_json, csr_pairs) and of CSR prompts in one list, their
    image fields replaced by IMAGE_VALUES, sometimes mutated further."""
    human = {"from": "human", "value": "<image>\nDescribe."}
    rows = []
    for i in range(rng.randint(1, 4)):
        image = rng.choice(IMAGE_VALUES)
        rows.append({"id": i, "image": image, "question": "Describe.", "prompt": "Describe.", "chosen": "a dog",
                     "rejected": "a cat", "conversations": [human, {"from": "gpt", "value": "a dog"}],
                     "rejected_conversations": [human, {"from": "gpt", "value": "a cat"}]})
        if rng.random() < 0.3:
            del rows[-1]["image"]
    data = json.dumps(rows).encode()
    return mutate(rng, data, _json_structural) if rng.random() < 0.2 else data


def resume_cache(rng: random.Random) -> bytes:
    lines = [json.dumps({"key": f"k{i}", "doc_id": i, "type": "generate_until", "response": "a dog"})
             for i in range(rng.randint(1, 6))]
    return mutate(rng, ("\n".join(lines) + "\n").encode(),
                  lambda r, d: d + r.choice([b"[1,2]\n", b'{"key": 5}\n', b"\xff\xfe\x00\n", b'{"key": "z"}\n',
                                             deep(r).encode() + b"\n", b'{"key": "t", "resp']))


TEMPLATE_PIECES = [
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{{ 'x' * 2000000000 }}", "{{ 'x' * 2e9 }}", "{{ raise_exception('boom') }}", "{% for %}", "{{ ''.__class__ }}",
    "{{ cycler.__init__.__globals__ }}", "{{ '%s %s' % ('a',) }}", "{{ 7 ** 100000000 }}", "{{ 'x'|center(2000000000) }}",
    "{{ 'x'.ljust(10**9) }}", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{{ messages[99] }}",
    "{{ messages|tojson }}", "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{{ '{:>999999999}'.format(1) }}", "{{ range(10)|list }}", "{{ lipsum(1000000) }}", "{{ 1/0 }}",
    "{{ x.y.z }}", "{% if add_generation_prompt %}ASSISTANT:{% endif %}", "{{ bos_token }}", "{% include 'x' %}",
    "{% extends 'x' %}", "{{ dict(a=1) }}", "{{ strftime_now('%Y') }}", "{% generation %}x{% endgeneration %}",
]


def chat_template(rng: random.Random) -> bytes:
    text = "".join(rng.choice(TEMPLATE_PIECES) for _ in range(rng.randint(1, 3)))
    return mutate(rng, text.encode()) if rng.random() < 0.3 else text.encode()


GENERATORS = {"eval_yaml": eval_yaml, "train_yaml": train_yaml, "config_json": config_json,
              "safetensors": safetensors_file, "chat_template": chat_template, "captions": captions, "pairs": pairs,
              "store_footer": footer, "resume_cache": resume_cache, "training_rows": training_rows}
