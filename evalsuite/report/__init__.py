"""HTML report: the results store -> one self-contained `index.html` (see `build.build_report`)."""
from evalsuite.report.build import build_report

__all__ = ["build_report"]
