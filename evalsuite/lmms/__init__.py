"""evalsuite's lmms-eval integration: the only package that imports `lmms_eval` (always lazily, inside
functions: the import costs ~6 s). tests/unit/test_import_graph.py fails if a module outside it does."""
