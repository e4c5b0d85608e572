"""Chat templates are untrusted input (a checkpoint from the Hub, a `--chat-template FILE`): render them
with limits on time, output size, loop size and value size, and turn every template failure into one
`UserError` line naming the template.

transformers renders templates in jinja2's ImmutableSandboxedEnvironment, which stops code execution
but bounds neither time nor memory (`{% for i in range(100000) %}{% for j in range(100000) %}x...`,
`{{ 'x' * 2000000000 }}`). `bounded_rendering()` makes transformers' template compiler (looked up by
`render_jinja_template` at call time) return templates compiled in the same environment with:

- `range` drawing from a budget of RANGE_BUDGET items per render (nested loops included);
- `*`, `+`, `**`, `%` and every filter refusing a result (or an int argument) over MAX_VALUE;
- output collected chunk by chunk, refused past MAX_OUTPUT characters;
- a wall-clock deadline of TIME_LIMIT s, checked at every chunk and range item, and enforced by a
  SIGALRM timer when rendering in the main thread (a loop with no output over a non-range list);
- no `lipsum` (its size argument builds text before any check).

The prompt a template renders is unchanged: only templates that exceed a limit behave differently.
"""
from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
from typing import Any, Iterator

from evalsuite.errors import UserError

RANGE_BUDGET = 100_000       # range items per render, all loops together
MAX_VALUE = 1_000_000        # characters / items of one value built by an operator or a filter
MAX_OUTPUT = 1_000_000       # characters of one rendered prompt
TIME_LIMIT = 5.0             # seconds per render

_state = threading.local()
_compiled: dict[str, Any] = {}
_lock = threading.Lock()


def _limit_error():
    from jinja2.exceptions import TemplateError

    class TemplateLimitError(TemplateError):
        pass

    return TemplateLimitError


def _exceeded(what: str):
    return _limit_error()(f"the template exceeds a limit: {what}")


def _budget() -> dict:
    b = getattr(_state, "budget", None)
    if b is None:   # rendering outside bounded_render (e.g. a direct compile): a fresh budget per call site
        b = _state.budget = {"range": RANGE_BUDGET, "deadline": time.monotonic() + TIME_LIMIT}
    return b


def _check_time(b: dict) -> None:
    if time.monotonic() > b["deadline"]:
        raise _exceeded(f"rendering took over {TIME_LIMIT:g} s")


class _Range:
    """range() whose items are drawn from the render's budget (len/indexing as a range)."""

    def __init__(self, *args):
        self._r = range(*args)

    def __len__(self) -> int:
        return len(self._r)

    def __iter__(self) -> Iterator[int]:
        b = _budget()
        for i in self._r:
            b["range"] -= 1
            if b["range"] < 0:
                raise _exceeded(f"loops over more than {RANGE_BUDGET} range items")
            if not b["range"] & 0x3FF:
                _check_time(b)
            yield i

    def __getitem__(self, k):
        return self._r[k]

    def __repr__(self) -> str:
        return repr(self._r)


def _size(v: Any) -> int:
    return len(v) if isinstance(v, (str, bytes, list, tuple)) else 0


def _mul(a, b):
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) and len(seq) * max(n, 0) > MAX_VALUE:
            raise _exceeded(f"a value of more than {MAX_VALUE} characters or items")
    return a * b


def _add(a, b):
    if _size(a) + _size(b) > MAX_VALUE:
        raise _exceeded(f"a value of more than {MAX_VALUE} characters or items")
    return a + b


def _pow(a, b):
    if isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > 4096:
        raise _exceeded("a power with an exponent over 4096")
    return a ** b


_WIDE = re.compile(r"[%{:][^a-zA-Z%{}]*?(\*|\d{7,})")


def _mod(a, b):
    if isinstance(a, str) and _WIDE.search(a):
        raise _exceeded("a format width over 999999 or a '*' width")
    return a % b


def _bounded_filter(fn):
    @functools.wraps(fn)   # keeps jinja's pass_context / pass_eval_context marker
    def wrapper(*args, **kwargs):
        for v in (*args, *kwargs.values()):
            if type(v) is int and v > MAX_VALUE:
                raise _exceeded(f"a filter argument over {MAX_VALUE}")
            if isinstance(v, str) and fn.__name__ in ("do_format", "format") and _WIDE.search(v):
                raise _exceeded("a format width over 999999 or a '*' width")
        out = fn(*args, **kwargs)
        if _size(out) > MAX_VALUE:
            raise _exceeded(f"a value of more than {MAX_VALUE} characters or items")
        return out
    return wrapper


def _concat(chunks) -> str:
    """Environment.concat for a render: the output joined while its size and the clock are checked."""
    b = _budget()
    out, n = [], 0
    for c in chunks:
        n += len(c)
        if n > MAX_OUTPUT:
            raise _exceeded(f"output of more than {MAX_OUTPUT} characters")
        _check_time(b)
        out.append(c)
    return "".join(out)


def _bound_env(env) -> None:
    """Set the limits on a (new, unshared) sandboxed environment before it compiles a template."""
    env.intercepted_binops = frozenset({"*", "+", "**", "%"})
    env.binop_table = {**env.binop_table, "*": _mul, "+": _add, "**": _pow, "%": _mod}
    env.globals["range"] = _Range
    env.globals.pop("lipsum", None)
    env.filters = {k: _bounded_filter(f) for k, f in env.filters.items()}
    env.concat = _concat
    env.call = functools.partial(_call, type(env).call, env)


def _call(original, env, context, obj, *args, **kwargs):
    """Environment.call with the filter limits: str.ljust(10**9), '{:>999999999}'.format(1), ..."""
    for v in (*args, *kwargs.values()):
        if type(v) is int and v > MAX_VALUE:
            raise _exceeded(f"a call argument over {MAX_VALUE}")
    if isinstance(getattr(obj, "__self__", None), str) and _WIDE.search(obj.__self__):
        raise _exceeded("a format width over 999999 or a '*' width")
    out = original(env, context, obj, *args, **kwargs)
    if _size(out) > MAX_VALUE:
        raise _exceeded(f"a value of more than {MAX_VALUE} characters or items")
    return out


def bounded_compile(source: str):
    """transformers' compiled template for `source`, recompiled in its environment with the limits."""
    from transformers.utils import chat_template_utils as ctu

    with _lock:
        tpl = _compiled.get(source)
    if tpl is None:
        # transformers' environment (extensions, filters, globals), new per call, taken from an empty
        # template: compiling `source` there first would fold constants like 'x' * 2000000000 unbounded
        env = ctu._cached_compile_jinja_template("").environment
        _bound_env(env)
        tpl = env.from_string(source)
        with _lock:
            if len(_compiled) > 64:
                _compiled.clear()
            _compiled[source] = tpl
    return tpl


@contextlib.contextmanager
def _alarm(seconds: float):
    """SIGALRM after `seconds` in the main thread (the backstop for loops with no output and no range)."""
    import signal

    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0]:
        yield
        return

    def on_alarm(signum, frame):
        raise _exceeded(f"rendering took over {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_patch_lock = threading.Lock()
_patched = False


def _install() -> bool:
    """Route transformers' template compiler through bounded_compile (once); False if it cannot be."""
    global _patched
    with _patch_lock:
        if _patched:
            return True
        try:
            from transformers.utils import chat_template_utils as ctu
        except ImportError:
            return False
        if not hasattr(ctu, "_compile_jinja_template") or not hasattr(ctu, "_cached_compile_jinja_template"):
            return False
        ctu._compile_jinja_template = bounded_compile
        _patched = True
        return True


def render(call, where: str):
    """`call()` (an apply_chat_template call) under the limits; every template failure one UserError naming
    `where` (the template file, or the checkpoint whose template it is)."""
    import jinja2

    _install()
    _state.budget = {"range": RANGE_BUDGET, "deadline": time.monotonic() + TIME_LIMIT}
    try:
        with _alarm(TIME_LIMIT + 1):
            return call()
    except jinja2.TemplateSyntaxError as e:
        raise UserError(f"{where}: chat template syntax error (line {e.lineno}: {_first(e)})") from None
    except jinja2.TemplateError as e:   # raise_exception(...), SecurityError, our limits
        raise UserError(f"{where}: chat template failed ({type(e).__name__}: {_first(e)})") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, MemoryError,
            OverflowError, ZeroDivisionError) as e:   # a template's own bug, surfaced by jinja or transformers
        raise UserError(f"{where}: chat template failed ({type(e).__name__}: {_first(e)})") from None
    finally:
        _state.budget = None


def _first(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    line = text[0] if text else ""
    return line[:300] + ("..." if len(line) > 300 else "")


def read_template_file(path: str, max_bytes: int = 1_000_000) -> str:
    """A `--chat-template FILE` as text: missing, too big or not UTF-8 is one line naming the file."""
    from pathlib import Path

    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise UserError(f"chat_template: {path}: {size} bytes, more than a chat template needs "
                            f"({max_bytes} bytes at most)")
        raw = p.read_bytes()
    except OSError as exc:
        raise UserError(f"chat_template: cannot read {path!r} ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"chat_template: {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
