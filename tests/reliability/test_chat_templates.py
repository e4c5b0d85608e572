"""Chat templates are untrusted input (findings-reliability-2.md probes H12-H16): a checkpoint's template
or a `--chat-template FILE` is rendered with limits on time, output and value size and loop length
(evalsuite/models/template.py), and every template failure is one line naming the template, exit 2."""
from __future__ import annotations

import shutil
import time

import pytest

from evalsuite.errors import UserError
from tests.reliability.helpers import error_lines

HOSTILE = [
    ("H13-loop", "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "range items"),
    ("H13-silent-loop", "{% set s = 'x' * 100000 %}{% for i in s %}{% for j in s %}{% endfor %}{% endfor %}",
     "took over"),
    ("H14-bigstr", "{{ 'x' * 2000000000 }}", "characters or items"),
    ("H14-float", "{{ 'x' * 2e9 }}", "TypeError"),
    ("H14-doubling", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                     "{% endfor %}{{ ns.s }}", "characters or items"),
    ("H14-center", "{{ 'x'|center(2000000000) }}", "filter argument"),
    ("H14-ljust", "{{ 'x'.ljust(2000000000) }}", "call argument"),
    ("H14-format", "{{ '%999999999s' % 'x' }}", "format width"),
    ("H14-pow", "{{ 7 ** 100000000 }}", "exponent"),
    ("H15-raise", "{{ raise_exception('boom from template') }}", "boom from template"),
    ("H15-syntax", "{% for %}", "syntax error"),
    ("H12-escape", "{{ ''.__class__.__mro__ }}", "SecurityError"),
    ("H12-format", "{{ '%s %s' % ('a',) }}", "not enough arguments"),
    ("H12-recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
]


@pytest.fixture(scope="module")
def short_limits():
    from evalsuite.models import template

    old = template.TIME_LIMIT
    template.TIME_LIMIT = 1.0
    yield
    template.TIME_LIMIT = old


@pytest.mark.parametrize("probe, text, expect", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_H12_H13_H14_H15_hostile_template_file_is_one_line_bounded(probe, text, expect, tmp_path, tiny_vlm_dir,
                                                                   short_limits):
    """H12-H15 through `--chat-template FILE`: one UserError naming the file, within a few seconds."""
    from evalsuite.models.inputs import InputConfig
    from evalsuite.models.vlm import load_inputs

    f = tmp_path / "t.jinja"
    f.write_text(text)
    t = time.monotonic()
    with pytest.raises(UserError) as e:
        inputs = load_inputs(tiny_vlm_dir, InputConfig(chat_template=str(f)))
        t = time.monotonic()   # the render is bounded, not the processor's load (a cold worker imports transformers)
        inputs.prompt("describe")
    msg = str(e.value)
    assert msg.startswith(str(f)) and expect in msg and "\n" not in msg, msg
    assert time.monotonic() - t < 8


def test_H16_non_utf8_template_file_is_one_line(tmp_path, tiny_vlm_dir):
    """H16: a `--chat-template` file that is not UTF-8."""
    from evalsuite.models.inputs import InputConfig

    f = tmp_path / "t.jinja"
    f.write_bytes(b'{{ "caf\xe9" }}')
    with pytest.raises(UserError, match=r"t.jinja: not UTF-8 text"):
        InputConfig(chat_template=str(f)).template_text()


def test_ordinary_templates_render_unchanged(tiny_vlm_dir, tmp_path):
    """The checkpoint's own template renders as transformers renders it without the limits."""
    from transformers import AutoProcessor

    from evalsuite.models.vlm import load_inputs

    mi = load_inputs(tiny_vlm_dir)
    proc = AutoProcessor.from_pretrained(tiny_vlm_dir, local_files_only=True)
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "describe"}]}]
    from transformers.utils import chat_template_utils as ctu

    plain = ctu._cached_compile_jinja_template(proc.chat_template).render(
        messages=msgs, add_generation_prompt=True, tools=None, documents=None, **proc.tokenizer.special_tokens_map)
    assert mi.prompt("describe") == plain


def test_H13_checkpoint_template_loop_is_one_line_before_the_output_dir(capsys, tmp_path, tiny_vlm_dir, world_dir,
                                                                         short_limits):
    """H13 through `evalsuite run`: a checkpoint whose chat_template.jinja loops 10^10 times is one line, exit 2,
    and no output directory or store is created."""
    from evalsuite.cli import main

    ck = tmp_path / "ck"
    shutil.copytree(tiny_vlm_dir, ck)
    (ck / "chat_template.jinja").write_text(HOSTILE[0][1])
    rc = main(["run", "--ckpt", str(ck), "--data-root", str(world_dir), "--tasks", "caption", "--limit", "1",
               "--store", str(tmp_path / "st"), "--output", str(tmp_path / "o")])
    lines = error_lines(capsys.readouterr().err)
    assert rc == 2 and len(lines) == 1 and "its chat template" in lines[0] and "range items" in lines[0], lines
    assert not (tmp_path / "o").exists()
