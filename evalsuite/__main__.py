"""`python -m evalsuite ...` (and `torchrun -m evalsuite run ...`): the same CLI as `evalsuite`."""
import sys

from evalsuite.cli import main

sys.exit(main())
