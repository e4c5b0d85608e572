"""The one progress helper: a tqdm bar on a terminal, a plain line now and then anywhere else.

    for batch in progress_bar(batches, desc="generate", unit="batch"):
        ...
    with progress_bar(total=n, desc="evalsuite generate") as bar:
        bar.update(k)

A bar redrawn into a log file (`make demo > demo.log`, CI, a pipe) is thousands of carriage-return frames;
when the stream is not a terminal the helper writes one line at every tenth of the work and at least every
`every_s` seconds (tqdm's own bars in the libraries, e.g. the Trainer's, are slowed down the same way by
evalsuite/env.py). `disable` shows nothing.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Iterable, TextIO

EVERY_S = 30.0      # the longest a non-terminal stream goes without a progress line
EVERY_FRACTION = 0.1
MIN_S = 5.0         # the shortest gap between two lines: a task of a few seconds says only its end


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             disable: bool = False, stream: TextIO | None = None, every_s: float = EVERY_S):
    """tqdm(iterable, ...) on a terminal, else a `Lines` reporter with the same iterate/update/close/n API."""
    if total is None and iterable is not None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    if not disable and is_terminal(stream):
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, file=stream)
    return Lines(iterable, total=total, desc=desc, unit=unit, disable=disable, stream=stream, every_s=every_s)


class Lines:
    """Progress as whole lines: `desc: 30/100 batch (30%), 12 s, about 28 s left`, at each tenth of `total`
    at most every MIN_S seconds, at least every `every_s` seconds, and once at the end."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", disable: bool = False, stream: TextIO | None = None,
                 every_s: float = EVERY_S, clock=time.monotonic):
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.disable, self._stream, self.every_s, self._clock = disable, stream, every_s, clock
        self.n = 0
        self._start = self._last_time = clock()
        self._last_step = 0      # the last tenth reported
        self._closed = False
        self._said_end = False
        self._said_n = 0

    # tqdm's API as the project uses it
    def __iter__(self):
        for item in self.iterable or ():
            yield item
            self.update(1)
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.disable:
            return
        now = self._clock()
        step = int(self.n / self.total / EVERY_FRACTION) if self.total else -1
        since = now - self._last_time
        if (self.total and self.n >= self.total) or (step > self._last_step and since >= MIN_S) \
                or since >= self.every_s:
            self._say(now)
            self._last_step = max(step, self._last_step)

    def write(self, text: str) -> None:
        """A line of its own (tqdm.write's place: the Trainer's logged losses)."""
        stream = sys.stderr if self._stream is None else self._stream
        try:
            stream.write(text + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.disable and self.n != self._said_n:   # the last count, unless just said
            self._say(self._clock())

    def _say(self, now: float) -> None:
        self._last_time, self._said_n = now, self.n
        if self.total and self.n >= self.total:
            if self._said_end:
                return
            self._said_end = True
        elapsed = now - self._start
        head = f"{self.desc}: " if self.desc else ""
        if self.total:
            left = f", about {elapsed * (self.total - self.n) / self.n:.0f} s left" if 0 < self.n < self.total and elapsed >= 1 else ""
            text = f"{head}{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%), {elapsed:.0f} s{left}"
        else:
            text = f"{head}{self.n} {self.unit}, {elapsed:.0f} s"
        stream = sys.stderr if self._stream is None else self._stream
        try:
            stream.write(text + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stream: progress is never worth a failure
            pass
