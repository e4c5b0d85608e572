"""Where the annotation files and images of a COCO-format split live.

Two layouts are understood:
  world (evalsuite world build):  ROOT/annotations/instances_val.json,  ROOT/images/val/<file_name>
  real COCO 2014/2017:            ROOT/annotations/instances_val2014.json, ROOT/val2014/<file_name>
(ROOT/images/val2014/ is accepted for COCO too.)
"""
from __future__ import annotations

import os
from pathlib import Path

from evalsuite.errors import UserError


class CocoLayout:
    def __init__(self, root: str | os.PathLike, split: str):
        self.root = Path(root)
        self.split = split
        if not self.root.is_dir():
            raise UserError(f"{self.root}: COCO-format data root is not a directory")
        if not split or "/" in split or split.startswith("."):
            raise UserError(f"split {split!r}: expected a name such as val, train or val2014")

    def _annotation(self, kind: str) -> Path:
        path = self.root / "annotations" / f"{kind}_{self.split}.json"
        if not path.is_file():
            raise UserError(f"{path}: missing {kind} annotation file for split {self.split!r}")
        return path

    @property
    def instances_json(self) -> Path:
        return self._annotation("instances")

    @property
    def captions_json(self) -> Path:
        return self._annotation("captions")

    def image_dir_candidates(self) -> list[Path]:
        return [self.root / "images" / self.split, self.root / self.split]

    def find_image_dir(self) -> Path | None:
        """The image directory, or None when the split has no images here (annotations only)."""
        return next((d for d in self.image_dir_candidates() if d.is_dir()), None)

    @property
    def image_dir(self) -> Path:
        found = self.find_image_dir()
        if found is None:
            tried = ", ".join(str(d) for d in self.image_dir_candidates())
            raise UserError(f"no image directory for split {self.split!r} (tried {tried})")
        return found

    def image_path(self, file_name: str) -> Path:
        from evalsuite.files import safe_join

        path = safe_join(self.image_dir, file_name, field="file_name")
        if not path.is_file():
            raise UserError(f"{path}: image file missing (file_name {file_name!r} of split {self.split!r})")
        return path

    def __repr__(self) -> str:
        return f"CocoLayout(root={str(self.root)!r}, split={self.split!r})"
