"""evalsuite/progress.py: a tqdm bar on a terminal; on any other stream whole lines at each tenth of the work
and at least every 30 s, never carriage-return redraws."""
import io

from evalsuite.progress import Lines, progress_bar


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_non_terminal_stream_gets_a_line_per_tenth():
    out, now = io.StringIO(), [0.0]
    bar = Lines(range(1000), total=1000, desc="generate", unit="batch", stream=out, clock=lambda: now[0])
    seen = []
    for i in bar:
        seen.append(i)
        now[0] += 0.1            # 100 s in all: 10 s per tenth
    assert seen == list(range(1000))
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text
    assert len(lines) == 10, lines          # each tenth 100..1000
    assert lines[0] == "generate: 100/1000 batch (10%), 10 s, about 90 s left"
    assert lines[4].startswith("generate: 500/1000 batch (50%), 50 s")
    assert lines[-1] == "generate: 1000/1000 batch (100%), 100 s"


def test_a_quick_task_says_only_its_end():
    out = io.StringIO()
    assert list(progress_bar(range(1000), desc="GT captions", stream=out)) == list(range(1000))
    assert out.getvalue().splitlines() == [out.getvalue().strip()] and "1000/1000 it (100%)" in out.getvalue()


def test_a_slow_task_gets_a_line_every_30_s_between_tenths():
    out, now = io.StringIO(), [0.0]
    bar = Lines(total=1000, desc="trees", unit="tree", stream=out, clock=lambda: now[0])
    now[0] = 10
    bar.update(100)              # 10%
    for _ in range(20):          # one item per 40 s: no tenth crossed, so the clock says each line
        now[0] += 40
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + 20 and all(f"{100 + i + 1}/1000" in lines[1 + i] for i in range(20))
    assert lines[-1].endswith(", 810 s, about 5940 s left")


def test_update_api_and_unknown_total():
    out = io.StringIO()
    with progress_bar(total=10, desc="evalsuite generate", stream=out) as bar:
        for _ in range(5):
            bar.update(2)
        assert bar.n == 10
    assert out.getvalue().splitlines()[-1].startswith("evalsuite generate: 10/10 it (100%)")
    assert out.getvalue().count("10/10") == 1                      # the end said once, not again at close
    out = io.StringIO()
    list(progress_bar(iter(range(3)), desc="x", stream=out))      # a generator: no total, a line at the end
    assert out.getvalue().splitlines()[-1].startswith("x: 3 it")


def test_disabled_says_nothing_and_terminal_gets_tqdm():
    out = io.StringIO()
    assert list(progress_bar(range(50), stream=out, disable=True)) == list(range(50)) and out.getvalue() == ""
    tty = Tty()
    list(progress_bar(range(50), desc="bar", stream=tty))
    assert "\r" in tty.getvalue() and "bar: 100%" in tty.getvalue()       # tqdm's own redraws


def test_entry_points_slow_library_bars_when_stderr_is_not_a_terminal():
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    code = "import os; from evalsuite.env import setup_process; setup_process(); print(os.environ.get('TQDM_MININTERVAL'))"
    env = {k: v for k, v in os.environ.items() if k != "TQDM_MININTERVAL"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, check=True)
    assert res.stdout.strip() == "30"     # the Trainer's, model loading's and lmms-eval's tqdm bars: one frame per 30 s
