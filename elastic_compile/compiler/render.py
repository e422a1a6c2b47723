"""Plan -> text through Jinja2 -> parsed back -> checked.

Templating YAML as text is where Helm got hurt (quoting, booleans, injection), so:

* one environment factory, ``StrictUndefined`` (a typo in a template is an error, not an
  empty string): the built-in templates (ours, shipped in the package) render in a plain
  environment; custom templates from a platform team or a pull request run sandboxed,
  confined, bounded and under hard limits (:mod:`elastic_compile.compiler.sandbox`, imported
  only for them);
* scalars print through ``tojson`` and subtrees through ``to_yaml``; both emit JSON, which
  is valid YAML whatever the indentation around it, with characters that YAML would
  fold or reject escaped;
* the rendered text, ours or a custom template's, is parsed back with the same strict
  loader as user specs, and any failure names the template.
"""

from __future__ import annotations

import functools
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import jinja2
from jinja2.loaders import split_template_path

from elastic_compile.core.emit import json_text
from elastic_compile.core.errors import CompileError, SpecError
from elastic_compile.core.loader import load_text
from elastic_compile.targets import BUILTIN_TEMPLATES


def environment(template_dir: Path | None = None, package_templates: Path = BUILTIN_TEMPLATES) -> jinja2.Environment:
    """The Jinja2 environment: strict, our two value filters.

    Without ``template_dir`` it holds the templates of a target's package
    (``package_templates``: the built-in ones, or those a registered target ships), trusted:
    rendered in process, without the sandbox's check of every attribute read. With it
    (``--templates``), templates in that directory replace those by name, sandboxed,
    confined and bounded by :mod:`elastic_compile.compiler.sandbox`.
    """
    options: dict[str, Any] = {
        "undefined": jinja2.StrictUndefined,
        "autoescape": False,
        "keep_trailing_newline": True,
        "trim_blocks": True,
        "lstrip_blocks": True,
    }
    builtin = jinja2.FileSystemLoader(str(package_templates))
    env: jinja2.Environment
    if template_dir is None:
        # Our package's templates do not change under a running compile: no stat a render.
        env = jinja2.Environment(loader=builtin, auto_reload=False, **options)
        env.filters["tojson"] = env.filters["to_yaml"] = _value_filter
        # They only print: none of Jinja's globals (range, dict, lipsum, ...), which every
        # render would otherwise copy into its context.
        env.globals.clear()
    else:
        from elastic_compile.compiler import sandbox

        env = sandbox.environment_for(template_dir, builtin, **options)
        env.filters["tojson"] = env.filters["to_yaml"] = _bounded_value_filter
    return env


def _value_filter(value: Any) -> str:
    # A filter receives StrictUndefined without touching it; make it raise as printing would.
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    return json_text(value)


def _bounded_value_filter(value: Any) -> str:
    from elastic_compile.compiler import sandbox  # imported by environment() already

    # JSON of a value escapes each character to at most 6: bound it before it is built.
    if sandbox.value_size(value) > sandbox.MAX_VALUE_SIZE:
        raise sandbox.BoundExceeded(f"a value larger than {sandbox.MAX_VALUE_SIZE} characters and items")
    return _value_filter(value)


@lru_cache(maxsize=8)
def _cached_environment(template_dir: Path | None, package_templates: Path) -> jinja2.Environment:
    return environment(template_dir, package_templates)


# Rendered output may nest deeper and weigh more than the spec it came from.
_OUTPUT_MAX_BYTES = 32 * 1024 * 1024
_OUTPUT_MAX_DEPTH = 160
_OUTPUT_MAX_VALUES = 200_000
_OUTPUT_LIMITS: Final = {
    "max_bytes": _OUTPUT_MAX_BYTES,
    "max_depth": _OUTPUT_MAX_DEPTH,
    "max_values": _OUTPUT_MAX_VALUES,
    "max_chars": _OUTPUT_MAX_BYTES,  # JSON has no aliases: never more characters than bytes
}


def render(
    template_name: str, template_dir: Path | None = None, *, package_templates: Path = BUILTIN_TEMPLATES, **context: Any
) -> Any:
    """Render ``template_name`` (of ``package_templates``, or ``template_dir``'s) and parse the text back into data.

    Raises ``CompileError`` naming the template when Jinja fails, a bound or limit is hit,
    or the output is not a single valid YAML document.
    """
    where = f"template {template_name}"
    source = custom_template(template_dir, template_name) if template_dir is not None else None
    if source is None:
        try:
            text = _cached_environment(None, package_templates).get_template(template_name).render(**context)
        except Exception as e:
            raise CompileError(*_describe(e, where)) from e
    else:
        from elastic_compile.compiler import sandbox

        where = f"template {source}"
        try:
            args = (template_dir, package_templates, template_name, context)
            text = sandbox.render_limited(_render_custom, args, functools.partial(_describe, where=where))
        except sandbox.LimitExceeded as e:
            raise CompileError(where, str(e)) from e
    try:
        # Plain ints and floats: callers may yaml.safe_dump the result.
        data = load_text(text, f"<{where}>", source=False, **_OUTPUT_LIMITS).data
    except SpecError as e:
        first = e.problems[0]
        raise CompileError(
            where, f"output is not valid YAML at line {first.line}, column {first.col}: {first.message}"
        ) from e
    if not isinstance(data, dict):
        raise CompileError(where, "output is not a YAML mapping")
    return data


def _render_custom(template_dir: Path, package_templates: Path, template_name: str, context: dict[str, Any]) -> str:
    """What the sandbox's child runs: compile and render one custom template (its author controls both)."""
    from elastic_compile.compiler import sandbox

    template = _cached_environment(template_dir, package_templates).get_template(template_name)
    return sandbox.stream_bounded(template.generate(**context))


def custom_template(template_dir: Path, template_name: str) -> Path | None:
    """The file in ``template_dir`` that replaces ``template_name``, or None (the built-in one renders).

    Raises ``CompileError`` for a file the sandbox refuses (a symbolic link, a FIFO, ...).
    """
    from elastic_compile.compiler import sandbox

    try:
        parts = split_template_path(template_name)
        found = sandbox.read_confined(template_dir, parts)
    except sandbox.TemplateRefused as e:
        raise CompileError(f"--templates {template_dir}", str(e)) from e
    return None if found is None else template_dir.joinpath(*parts)


def _describe(e: BaseException, where: str) -> tuple[str, str]:
    """``(where, message)`` for a failed compile or render: one line, never a file's content."""
    if isinstance(e, jinja2.TemplateSyntaxError):
        return f"template {e.filename or where.removeprefix('template ')}:{e.lineno}", e.message or "syntax error"
    if isinstance(e, jinja2.TemplateNotFound):
        return where, f"not found: {e.name}"
    if isinstance(e, jinja2.exceptions.SecurityError):
        return where, f"blocked by the sandbox: {_first_line(e)}"
    if isinstance(e, jinja2.UndefinedError):
        return where, f"undefined value: {_first_line(e)}"
    if isinstance(e, jinja2.TemplateError):
        return where, _first_line(e)
    from elastic_compile.compiler import sandbox

    if isinstance(e, sandbox.LimitExceeded):
        return where, str(e)
    if isinstance(e, MemoryError):
        return where, f"ran out of memory (the limit is {sandbox.ADDRESS_SPACE_BYTES >> 20} MiB)"
    if isinstance(e, RecursionError):
        return where, "cannot render: nesting or recursion too deep"
    if isinstance(e, (TypeError, ValueError, AttributeError, KeyError, IndexError, ArithmeticError)):
        return where, f"cannot render: {type(e).__name__}: {_first_line(e)}"
    raise e


def _first_line(e: BaseException) -> str:
    lines = str(e).splitlines()
    return lines[0] if lines else type(e).__name__
