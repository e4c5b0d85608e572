"""Generation engines: `hf` (transformers `generate` in this process, the default) and `vllm` (a vLLM
worker process in vLLM's own environment: docs/engines.md). base.py: the Engine protocol and both engines;
vllm_process.py: the worker process and its replicas; vllm_generate.py: GenRequests as worker requests;
vllm_lmms.py: the lmms-eval backend; vllm_check.py: what is checked before a worker starts.

An engine other than `hf` is part of every result's identity and of every resume-cache key it answers
(`identity()`), so answers of two engines never meet in one result or one cache. `hf` adds no key:
results and caches written before engines existed keep their keys.
"""
from __future__ import annotations

ENGINES = ("hf", "vllm")
