"""The one way evalsuite and training open an image: a path, raw bytes or a PIL image -> PIL RGB.

Images come from user data folders, so every way a file can be bad (missing, not an image, truncated,
a decompression bomb: a tiny file declaring a huge canvas) is a one-line `UserError` naming the file,
never a PIL traceback. PIL raises `DecompressionBombError` above 2x `Image.MAX_IMAGE_PIXELS` and only
*warns* between 1x and 2x; that warning is turned into the same error, since decoding such an image
would still take gigabytes.
"""
from __future__ import annotations

import io
import os
import struct
import threading
import warnings
from typing import Any

from evalsuite.errors import UserError

# PIL's own default; checked here, since libraries loaded in the same process (lmms-eval's task
# modules) raise Image.MAX_IMAGE_PIXELS and turn on ImageFile.LOAD_TRUNCATED_IMAGES for everyone
MAX_PIXELS = 89_478_485
_TRUNCATED_FLAG = threading.Lock()


def open_rgb(src: Any, name: str | os.PathLike | None = None):
    """`src` (path, bytes or PIL image) decoded to an RGB PIL image; `name` labels bytes in messages."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(src, Image.Image):
        return src.convert("RGB")
    raw = isinstance(src, (bytes, bytearray, memoryview))
    label = str(name if name is not None else ("<image bytes>" if raw else src))
    from PIL import ImageFile

    try:
        with warnings.catch_warnings(), _TRUNCATED_FLAG:
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(src) if raw else src) as im:
                w, h = im.size
                if w * h > MAX_PIXELS:
                    raise Image.DecompressionBombError(f"{w}x{h} = {w * h} pixels, more than {MAX_PIXELS}")
                saved, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, False
                try:
                    return im.convert("RGB")      # convert() decodes fully: truncation shows here
                finally:
                    ImageFile.LOAD_TRUNCATED_IMAGES = saved
    except FileNotFoundError:
        raise UserError(f"{label}: image not found") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise UserError(f"{label}: image too large to decode ({e})") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError, struct.error) as e:
        # PIL's plugins report a damaged file with any of these
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{label}: image unreadable ({reason})") from None
