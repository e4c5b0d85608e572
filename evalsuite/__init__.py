"""evalsuite: iterate on a VLM (SFT, DPO, CSR) and see per iteration whether it hallucinates less.

Nothing heavy is imported here, so `evalsuite --help` stays instant.
"""
__version__ = "0.1.0"
