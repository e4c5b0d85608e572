"""evalsuite's lmms-eval integration: the only package that imports `lmms_eval` (always lazily, inside
functions: the import costs ~6 s). tests/unit/test_import_graph.py fails if a module outside it does."""
from pathlib import Path

YAML_DIR = Path(__file__).resolve().parent / "yaml"   # the local tasks' yamls (`lmms-eval --include_path`)
