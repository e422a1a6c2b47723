"""Plan -> text through Jinja2 -> parsed back -> checked.

Templating YAML as text is where Helm got hurt (quoting, booleans, injection), so:

* one environment factory: sandboxed (custom templates from a platform team run here
  too), ``StrictUndefined`` (a typo in a template is an error, not an empty string);
* scalars print through ``tojson`` and subtrees through ``to_yaml``; both emit JSON, which
  is valid YAML whatever the indentation around it, with characters that YAML would
  fold or reject escaped;
* the rendered text is parsed back with the same strict loader as user specs, and any
  failure names the template.
"""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from elastic_compile.core.emit import plain
from elastic_compile.core.errors import CompileError, SpecError
from elastic_compile.core.loader import load_text

BUILTIN_TEMPLATES = Path(__file__).resolve().parent.parent / "templates"

# JSON leaves these raw with ensure_ascii=False, but YAML treats NEL, LS, PS as line
# breaks (folded to spaces inside quotes) and rejects C1 controls, BOM and surrogates.
_YAML_UNSAFE = re.compile("[\u007f-\u009f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def json_text(value: Any) -> str:
    """``value`` as single-line JSON that any YAML reader parses back to ``value``."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=False, allow_nan=False)
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def environment(template_dir: Path | None = None) -> jinja2.Environment:
    """The one Jinja2 environment: sandboxed, strict, our two value filters.

    ``template_dir`` (``--templates``) is searched before the built-in templates, so a
    platform team can replace any of them.
    """
    paths = [str(template_dir)] if template_dir is not None else []
    paths.append(str(BUILTIN_TEMPLATES))
    env = _Sandbox(
        loader=jinja2.FileSystemLoader(paths),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tojson"] = _value_filter
    env.filters["to_yaml"] = _value_filter
    return env


# A custom template may not build values larger than this with `*` (the sandbox's own
# range() is capped at 100,000 items); a platform template never needs more.
_MAX_SEQUENCE = 1_000_000
# Wall-clock budget for rendering a custom template; ours take milliseconds.
RENDER_SECONDS = 2.0


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The sandbox, plus a size check on `*` so that 'x' * 10**10 cannot eat the memory."""

    intercepted_binops = frozenset({"*"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * times > _MAX_SEQUENCE:
                raise jinja2.exceptions.SecurityError(f"a value of more than {_MAX_SEQUENCE} items is not allowed")
        return super().call_binop(context, operator, left, right)


class _RenderTimeout(Exception):
    pass


@contextmanager
def _time_budget(seconds: float | None) -> Iterator[None]:
    """Interrupt a render that runs too long (main thread only: SIGALRM is delivered there)."""
    if seconds is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(_signum: int, _frame: Any) -> None:
        raise _RenderTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _value_filter(value: Any) -> str:
    # A filter receives StrictUndefined without touching it; make it raise as printing would.
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    return json_text(value)


@lru_cache(maxsize=8)
def _cached_environment(template_dir: Path | None) -> jinja2.Environment:
    return environment(template_dir)


# Rendered output may nest deeper and weigh more than the spec it came from.
_OUTPUT_MAX_BYTES = 32 * 1024 * 1024
_OUTPUT_MAX_DEPTH = 160
_OUTPUT_MAX_VALUES = 200_000


def render(template_name: str, template_dir: Path | None = None, **context: Any) -> Any:
    """Render ``template_name`` and parse the text back into data.

    Raises ``CompileError`` naming the template when Jinja fails or the output is not a
    single valid YAML document.
    """
    env = _cached_environment(template_dir)
    where = f"template {template_name}"
    builtin = False
    try:
        template = env.get_template(template_name)
        source = Path(template.filename) if template.filename else None
        builtin = source is not None and source.resolve().parent == BUILTIN_TEMPLATES
        if source is not None and not builtin:
            where = f"template {source}"
        with _time_budget(None if builtin else RENDER_SECONDS):
            text = template.render(**context)
    except jinja2.TemplateSyntaxError as e:
        raise CompileError(f"template {e.filename or template_name}:{e.lineno}", e.message or str(e)) from e
    except jinja2.TemplateNotFound as e:
        raise CompileError(where, "not found") from e
    except jinja2.exceptions.SecurityError as e:
        raise CompileError(where, f"blocked by the sandbox: {e}") from e
    except jinja2.UndefinedError as e:
        raise CompileError(where, f"undefined value: {e.message}") from e
    except jinja2.TemplateError as e:
        raise CompileError(where, str(e)) from e
    except _RenderTimeout as e:
        raise CompileError(where, f"rendering took longer than {RENDER_SECONDS:g} s") from e
    except MemoryError as e:
        raise CompileError(where, "rendering ran out of memory") from e
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError, ArithmeticError) as e:
        raise CompileError(where, f"cannot render: {type(e).__name__}: {e}") from e
    try:
        loaded = load_text(
            text,
            f"<{where}>",
            max_bytes=_OUTPUT_MAX_BYTES,
            max_depth=_OUTPUT_MAX_DEPTH,
            max_values=_OUTPUT_MAX_VALUES,
            max_chars=_OUTPUT_MAX_BYTES,  # JSON has no aliases: never more characters than bytes
            trusted=builtin,
        )
    except SpecError as e:
        first = e.problems[0]
        raise CompileError(
            where, f"output is not valid YAML at line {first.line}, column {first.col}: {first.message}"
        ) from e
    if not isinstance(loaded.data, dict):
        raise CompileError(where, "output is not a YAML mapping")
    return plain(loaded.data, top=False)  # plain ints and floats: callers may yaml.safe_dump it
