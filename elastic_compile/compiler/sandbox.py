"""The sandbox for custom templates (``--templates DIR``): confined, bounded, and hard-limited.

A custom template arrives in a pull request and CI renders it; it must not read what it
was not given, nor hang or exhaust the runner. Three layers, each enough for its threat:

* **confinement** (:class:`ConfinedLoader`): a template, and anything it includes,
  imports or extends, is a regular file inside DIR, opened without following symbolic
  links (``O_NOFOLLOW`` on every path component, relative to DIR's descriptor), at most
  :data:`MAX_TEMPLATE_BYTES`; names not found in DIR fall back to the built-in templates.
* **bounds before work** (:class:`BoundedSandbox`): Jinja's immutable sandbox without its
  compile-time constant folding, where every operation that could allocate or loop in C
  (``*``, ``**``, ``+``, ``%``, ``~``, comparisons, list/tuple/dict displays, ``str``
  methods, ``format``, filters) first checks the size of what it would build against
  :data:`MAX_VALUE_SIZE`. One C-level call can then take milliseconds, not minutes.
* **a hard limit** (:func:`render_limited`): the whole compile and render of a custom
  template runs in a child process with ``RLIMIT_CPU`` and ``RLIMIT_AS`` set, so whatever
  the bounds missed ends in a located error instead of a hung or swapping CI runner. A
  single-threaded process forks it; a threaded one (where ``fork`` may deadlock the child
  on a lock another thread held) starts a new interpreter, which limits itself. Where the
  system does not give a process its mapped size (no ``/proc``: macOS, the BSDs), the
  address-space limit is not set (:func:`hard_limits` says what holds).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import pickle
import re
import resource
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import jinja2.compiler
import jinja2.exceptions
import jinja2.filters
import jinja2.nodes
import jinja2.sandbox
from jinja2.loaders import split_template_path

#: A template file larger than this is refused (ours are under 1 KiB).
MAX_TEMPLATE_BYTES = 256 * 1024
#: The largest value a custom template may build or traverse in one operation, in
#: characters plus items (each reference counted again: ``[s, s]`` is twice ``s``). Twice
#: the loader's expansion bound, so that any spec the loader accepts can be printed whole.
MAX_VALUE_SIZE = 16 * 1024 * 1024
#: Integers beyond this many bits are refused (``9 ** (9 ** 8)`` would take minutes).
MAX_INT_BITS = 65_536
#: Rendered text beyond this many characters is refused while it streams.
MAX_OUTPUT_CHARS = 32 * 1024 * 1024
#: CPU seconds the child may use for one template (ours render in milliseconds).
CPU_SECONDS = 2
#: Address space the child may add to what the process already maps.
ADDRESS_SPACE_BYTES = 1024 * 1024 * 1024
#: Wall-clock guard for a child that uses no CPU (never expected); it is killed after this.
WALL_SECONDS = 30.0


class TemplateRefused(jinja2.TemplateError):
    """A template file that may not be loaded (a symbolic link, not a regular file, too big)."""


class BoundExceeded(jinja2.exceptions.SecurityError):
    """An operation would build or traverse more than the sandbox allows."""


# --------------------------------------------------------------------------- loading


def read_confined(directory: Path, parts: Iterable[str], max_bytes: int = MAX_TEMPLATE_BYTES) -> str | None:
    """The text of ``directory/parts...``, or None when there is no such file.

    Every component is opened relative to its parent's descriptor with ``O_NOFOLLOW``, so
    neither a symbolic link nor a swap of one after a check can lead outside
    ``directory``. Raises :class:`TemplateRefused` for a symbolic link anywhere on the
    way (``directory`` itself included), a file that is not a regular one (a FIFO, a
    device, a socket), a hard link, or a file over ``max_bytes``; never reads those.
    """
    names = list(parts)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(directory, flags | os.O_DIRECTORY)
    except OSError as e:
        raise TemplateRefused(_refusal(str(directory), e)) from None
    try:
        shown = str(directory)
        for name in names[:-1]:
            shown = f"{shown}/{name}"
            try:
                inner = os.open(name, flags | os.O_DIRECTORY, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                raise TemplateRefused(_refusal(shown, e)) from None
            os.close(fd)
            fd = inner
        shown = f"{shown}/{names[-1]}"
        try:
            # lstat first: opening a FIFO would block and opening a device may act.
            info = os.stat(names[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        _check_regular(shown, info, max_bytes)
        try:
            file_fd = os.open(names[-1], flags | os.O_NONBLOCK, dir_fd=fd)
        except OSError as e:
            raise TemplateRefused(_refusal(shown, e)) from None
        with os.fdopen(file_fd, "rb") as f:
            opened = os.fstat(f.fileno())
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                raise TemplateRefused(f"{shown}: replaced while being opened; refused")
            _check_regular(shown, opened, max_bytes)
            raw = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise TemplateRefused(f"{shown}: larger than {max_bytes} bytes; refused")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TemplateRefused(f"{shown}: not valid UTF-8") from None


def _check_regular(shown: str, info: os.stat_result, max_bytes: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise TemplateRefused(f"{shown}: a symbolic link; templates must be regular files inside the directory")
    if not stat.S_ISREG(info.st_mode):
        raise TemplateRefused(f"{shown}: not a regular file; refused")
    if info.st_nlink > 1:
        # A hard link may name any file of the same file system (a CI runner's secrets).
        raise TemplateRefused(f"{shown}: a hard link ({info.st_nlink} names); refused")
    if info.st_size > max_bytes:
        raise TemplateRefused(f"{shown}: larger than {max_bytes} bytes; refused")


def _refusal(shown: str, error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return f"{shown}: a symbolic link; templates must be regular files inside the directory"
    if error.errno == errno.ENOTDIR:
        return f"{shown}: not a directory (or a symbolic link); refused"
    return f"{shown}: cannot open: {error.strerror}"


class ConfinedLoader(jinja2.BaseLoader):
    """Templates from ``directory`` (confined, see :func:`read_confined`), else from ``fallback``."""

    def __init__(self, directory: Path, fallback: jinja2.BaseLoader) -> None:
        self.directory = directory
        self.fallback = fallback

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str | None, Callable[[], bool] | None]:
        parts = split_template_path(template)  # raises TemplateNotFound for ".." and the like
        text = read_confined(self.directory, parts)
        if text is None:
            return self.fallback.get_source(environment, template)
        return text, str(self.directory.joinpath(*parts)), lambda: False


# --------------------------------------------------------------------------- sizes


def value_size(value: Any, limit: int = MAX_VALUE_SIZE) -> int:
    """What ``value`` weighs when printed, compared or copied: characters plus items.

    Every reference counts (``[s] * 3`` weighs three ``s``), shared objects are measured
    once. Counting stops a little past ``limit``: the result is then only "too big".
    """
    memo: dict[int, int] = {}

    def size(item: Any, depth: int) -> int:
        if isinstance(item, (str, bytes)):
            return len(item) + 1
        if isinstance(item, bool) or item is None or isinstance(item, float):
            return 1
        if isinstance(item, int):
            return item.bit_length() // 3 + 1
        if not isinstance(item, (list, tuple, dict, set, frozenset)):
            return 1  # the plan, Undefined, macros: what they yield is measured when used
        known = memo.get(id(item))
        if known is not None:
            return known
        if depth > 200:
            return limit + 1  # nesting this deep only comes from a loop building it
        total = 1
        children: Iterable[Any] = (x for kv in item.items() for x in kv) if isinstance(item, dict) else item
        for child in children:
            total += size(child, depth + 1)
            if total > limit:
                break
        memo[id(item)] = total
        return total

    return size(value, 0)


def _require(size: int, what: str) -> None:
    if size > MAX_VALUE_SIZE:
        raise BoundExceeded(f"{what} would be larger than {MAX_VALUE_SIZE} characters and items")


def _sized(value: Any, what: str) -> Any:
    _require(value_size(value), what)
    return value


def _int_bits(value: Any) -> int:
    return abs(value).bit_length() if isinstance(value, int) and not isinstance(value, bool) else 0


def _check_int_bits(bits: int, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise BoundExceeded(f"{what} would have more than {MAX_INT_BITS} bits")


# ``%`` conversions: flags, width, precision, length modifier, type.
_PERCENT = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.DOTALL)


def check_percent(fmt: str, args: Any) -> None:
    """Refuse ``fmt % args`` when widths or precisions would build more than the bound."""
    total = len(fmt) + value_size(args)
    for width, precision, _kind in _PERCENT.findall(fmt):
        if "*" in (width, precision):
            raise BoundExceeded("'*' widths are not allowed in % formats")
        total += int(width or 0) + int(precision or 0)
    _require(total, "the % format")


# A format spec: [[fill]align][sign][z][#][0][width][grouping][.precision][type]
_FORMAT_SPEC = re.compile(r"^(?:.?[<>=^])?[+\- ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?[a-zA-Z%]?$", re.DOTALL)


class _BoundedFormatter(jinja2.sandbox.SandboxedFormatter):
    """``str.format`` in the sandbox, with widths and the whole result bounded."""

    def __init__(self, env: jinja2.Environment) -> None:
        super().__init__(env)
        self.total = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        match = _FORMAT_SPEC.match(format_spec)
        if match is None:
            raise BoundExceeded(f"format spec not allowed: {format_spec[:40]!r}")
        self.total += int(match.group(1) or 0) + int(match.group(2) or 0) + value_size(value)
        _require(self.total, "the formatted string")
        return super().format_field(value, format_spec)


# --------------------------------------------------------------------------- calls


def _width_at(index: int) -> Callable[[str, tuple[Any, ...], dict[str, Any]], int]:
    def size(text: str, args: tuple[Any, ...], _kwargs: dict[str, Any]) -> int:
        width = args[index] if len(args) > index else 0
        return max(len(text), width if isinstance(width, int) else 0)

    return size


def _replace_size(text: str, old: Any, new: Any, count: Any = -1) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    hits = len(text) + 1 if old == "" else text.count(old)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(0, len(new) - len(old))


def _join_size(sep: str, items: list[Any]) -> int:
    return len(sep) * max(0, len(items) - 1) + sum(value_size(i) for i in items)


# str methods a template may call, with the size of what each would build (None: at most
# the string itself). Anything else on a str (translate, encode, ...) is refused.
_STR_METHODS: dict[str, Callable[[str, tuple[Any, ...], dict[str, Any]], int] | None] = {
    **dict.fromkeys(
        [
            *("capitalize", "casefold", "count", "endswith", "find", "index", "isalnum", "isalpha", "isdigit"),
            *("islower", "isspace", "istitle", "isupper", "lower", "lstrip", "partition", "removeprefix"),
            *("removesuffix", "rfind", "rindex", "rpartition", "rsplit", "rstrip", "split", "splitlines"),
            *("startswith", "strip", "swapcase", "title", "upper"),
        ]
    ),
    "center": _width_at(0),
    "ljust": _width_at(0),
    "rjust": _width_at(0),
    "zfill": _width_at(0),
    "expandtabs": lambda s, a, k: len(s) + s.count("\t") * int(a[0] if a else k.get("tabsize", 8)),
    "replace": lambda s, a, k: _replace_size(s, *a, **k),
}


# --------------------------------------------------------------------------- filters


def _bounded_filter(name: str, check: Callable[..., None] | None = None) -> Callable[..., Any]:
    """Jinja's filter ``name``, with ``check(value, *args, **kwargs)`` run first."""
    original = jinja2.filters.FILTERS[name]
    pass_arg = getattr(original, "jinja_pass_arg", None)

    def bounded(*args: Any, **kwargs: Any) -> Any:
        user = args[1:] if pass_arg is not None else args
        _require(sum(value_size(a) for a in user) + value_size(kwargs), f"filter {name}'s input")
        if check is not None:
            check(*user, **kwargs)
        return original(*args, **kwargs)

    if pass_arg is not None:
        bounded.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]
    bounded.__name__ = name
    return bounded


def _check_width(value: Any, width: Any = 80, *_args: Any, **_kwargs: Any) -> None:
    lines = str(value).count("\n") + 1
    _require(len(str(value)) + lines * (width if isinstance(width, int) else len(str(width))), "the padded text")


def _check_join(value: Any, d: str = "", *_args: Any, **_kwargs: Any) -> None:
    items = list(value) if isinstance(value, (list, tuple, set, frozenset, dict, range)) else []
    _require(_join_size(str(d), items), "the joined string")


def _check_replace(value: Any, old: Any, new: Any, count: Any = None) -> None:
    _require(_replace_size(str(value), old, new, -1 if count is None else count), "the replaced string")


def _check_format(value: Any, *args: Any, **kwargs: Any) -> None:
    check_percent(str(value), kwargs or args)


def _check_count(value: Any, count: Any = 1, fill_with: Any = None) -> None:
    if isinstance(count, int) and count > MAX_VALUE_SIZE:
        raise BoundExceeded(f"more than {MAX_VALUE_SIZE} groups")
    if fill_with is not None and isinstance(count, int):
        _require(count * value_size(fill_with), "the filled groups")


def _check_sum(value: Any, *_args: Any, **_kwargs: Any) -> None:
    items = value if isinstance(value, (list, tuple, range)) else ()
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
        raise BoundExceeded("sum takes numbers only")


def _check_wordwrap(value: Any, width: Any = 79, *args: Any, **kwargs: Any) -> None:
    wrap = kwargs.get("wrapstring", args[1] if len(args) > 1 else "\n")
    pieces = len(str(value)) // max(1, width if isinstance(width, int) else 1) + 1
    _require(len(str(value)) + pieces * len(str(wrap or "\n")), "the wrapped text")


def _check_truncate(value: Any, length: Any = 255, killwords: Any = False, end: Any = "...", *_a: Any) -> None:
    _require(len(str(value)) + len(str(end)), "the truncated text")


# Jinja's filters a custom template may use, each bounded; the rest (random: not
# deterministic; pprint, urlize, xmlattr, filesizeformat: not needed to print YAML) are gone.
_FILTER_CHECKS: dict[str, Callable[..., None] | None] = {
    **dict.fromkeys(
        [
            *("abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float"),
            *("forceescape", "groupby", "int", "items", "last", "length", "list", "lower", "map", "max", "min"),
            *("reject", "rejectattr", "reverse", "round", "safe", "select", "selectattr", "sort", "string"),
            *("striptags", "title", "trim", "unique", "upper", "urlencode", "wordcount"),
        ]
    ),
    "batch": _check_count,
    "slice": _check_count,
    "center": _check_width,
    "indent": _check_width,
    "join": _check_join,
    "replace": _check_replace,
    "format": _check_format,
    "sum": _check_sum,
    "wordwrap": _check_wordwrap,
    "truncate": _check_truncate,
}


# --------------------------------------------------------------------------- the environment


class _BoundedCodeGenerator(jinja2.compiler.CodeGenerator):
    """Routes the operations Jinja compiles to plain Python through size checks.

    Comparisons, ``~`` and list/tuple/dict displays compile to Python operators, which
    the sandbox never sees: here each goes through the environment first.
    """

    def visit_Compare(self, node: jinja2.nodes.Compare, frame: jinja2.compiler.Frame) -> None:
        # a < b < c: each operand is checked once, then Python compares as usual.
        self.write("(environment.checked(")
        self.visit(node.expr, frame)
        self.write(")")
        for op in node.ops:
            self.write(f" {jinja2.compiler.operators[op.op]} environment.checked(")
            self.visit(op.expr, frame)
            self.write(")")
        self.write(")")

    def visit_Concat(self, node: jinja2.nodes.Concat, frame: jinja2.compiler.Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_List(self, node: jinja2.nodes.List, frame: jinja2.compiler.Frame) -> None:
        self.write("environment.checked(")
        super().visit_List(node, frame)
        self.write(")")

    def visit_Dict(self, node: jinja2.nodes.Dict, frame: jinja2.compiler.Frame) -> None:
        self.write("environment.checked(")
        super().visit_Dict(node, frame)
        self.write(")")

    def visit_Tuple(self, node: jinja2.nodes.Tuple, frame: jinja2.compiler.Frame) -> None:
        if node.ctx != "load":  # an assignment target: {% for a, b in ... %}
            super().visit_Tuple(node, frame)
            return
        self.write("environment.checked(")
        super().visit_Tuple(node, frame)
        self.write(")")


def _no_constant_output(context: Any, value: Any) -> Any:
    # A finalize that needs the context stops Jinja from evaluating {{ 9 ** 9 ** 8 }} at
    # compile time (CodeGenerator.visit_Output folds constant output otherwise).
    return value


_no_constant_output.jinja_pass_arg = jinja2.utils._PassArg.context  # type: ignore[attr-defined]


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with no constant folding and every costly operation bounded."""

    intercepted_binops = frozenset({"*", "**", "+", "%", "//", "/", "-"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, **options: Any) -> None:
        options.setdefault("finalize", _no_constant_output)
        super().__init__(optimized=False, **options)
        self.filters = {name: _bounded_filter(name, check) for name, check in _FILTER_CHECKS.items()}
        self.globals.pop("lipsum", None)  # lipsum(10**6) builds a million paragraphs

    def checked(self, value: Any) -> Any:
        """``value`` when it is within :data:`MAX_VALUE_SIZE`; raises :class:`BoundExceeded` otherwise."""
        return _sized(value, "a value")

    def bounded_concat(self, values: tuple[Any, ...]) -> str:
        """``a ~ b ~ c``, bounded before the strings are built."""
        _require(sum(value_size(v) for v in values), "the concatenated string")
        return "".join(str(v) for v in values)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                    _require(value_size(seq) * max(0, times), "the repeated value")
            _check_int_bits(_int_bits(left) + _int_bits(right), "the product")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
                _check_int_bits(_int_bits(left) * right, "the power")
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                _require(value_size(left) + value_size(right), "the sum")
        elif operator == "%" and isinstance(left, str):
            check_percent(left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", "")
            if name not in _STR_METHODS and name not in ("format", "format_map"):
                raise BoundExceeded(f"str.{name} is not allowed in templates")
            measure = _STR_METHODS.get(name)
            if measure is not None:
                _require(measure(owner, args, kwargs), f"str.{name}")
            if name == "join" and args:
                items = list(args[0])
                _require(_join_size(owner, items), "the joined string")
                args = (items, *args[1:])
        result = super().call(__context, __obj, *args, **kwargs)
        return _sized(result, "a call's result") if isinstance(result, (list, tuple, dict, str)) else result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text: str = value.__self__
        is_map = value.__name__ == "format_map"

        def bounded(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs, args = args[0], ()
            return str(_BoundedFormatter(self).vformat(text, args, kwargs))

        return bounded


_STR_METHODS["join"] = None  # measured in BoundedSandbox.call, where the items are at hand


# --------------------------------------------------------------------------- the hard limit


#: Turns an exception raised in the renderer into ``(kind, message)``.
Describe = Callable[[BaseException], tuple[str, str]]


class LimitExceeded(Exception):
    """The child rendering a custom template hit a hard limit or died."""


#: Where Linux gives a process its mapped size (VmSize), which the address-space limit adds to;
#: absent on macOS and the BSDs, where the limit is not set (the CPU limit and the bounds hold).
PROC_STATUS = "/proc/self/status"
#: One entry per thread of this process (Linux), threads of C libraries included.
PROC_TASKS = "/proc/self/task"


def _mapped_bytes() -> int | None:
    """What this process maps now, or None where the system does not say (no /proc)."""
    try:
        with open(PROC_STATUS) as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), None)
    except OSError:
        return None


def hard_limits() -> tuple[str, ...]:
    """The hard limits a custom template renders under on this machine (docs/security.md)."""
    limits = [f"{CPU_SECONDS} s of CPU", f"{WALL_SECONDS:g} s of wall clock"]
    if _mapped_bytes() is not None:
        limits.insert(1, f"{ADDRESS_SPACE_BYTES >> 20} MiB of address space")
    return tuple(limits)


def _limit_child(*, spawned: bool) -> None:
    """The renderer's own limits: no core file, CPU_SECONDS more of CPU, ADDRESS_SPACE_BYTES more mapped.

    Never above a limit the caller already set (a CI runner's, a test's): lowering is allowed,
    raising a hard limit is not, and the child would die before it answered.
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = CPU_SECONDS
    if spawned:  # a forked child starts at 0 s; a spawned one has spent its start-up already
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu += math.ceil(usage.ru_utime + usage.ru_stime)
    _lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    mapped = _mapped_bytes()
    if mapped:
        limit = mapped + ADDRESS_SPACE_BYTES
        _lower(resource.RLIMIT_AS, limit, limit)

    def out_of_cpu(_signum: int, _frame: Any) -> NoReturn:
        raise LimitExceeded(f"used more than {CPU_SECONDS} s of CPU")

    signal.signal(signal.SIGXCPU, out_of_cpu)


def _lower(which: int, soft: int, hard: int) -> None:
    """Set a limit to ``(soft, hard)``, or to the hard limit already in force when that is lower."""
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:
        hard = min(hard, current)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _single_threaded() -> bool:
    """Whether this process runs one thread, so that a bare ``fork`` is safe.

    A forked child of a threaded process inherits locks that other threads held (the
    allocator's, the import lock, a logging handler's) and may hang on them. Linux lists
    every thread, a C library's too; elsewhere only Python's threads are known.
    """
    try:
        return len(os.listdir(PROC_TASKS)) == 1
    except OSError:
        return threading.active_count() == 1


def render_limited(call: Callable[..., str], args: tuple[Any, ...], describe: Describe) -> str:
    """``call(*args)`` in a child process under CPU and address-space limits; its text.

    ``describe`` turns an exception raised in the child into ``(kind, message)``; the
    parent raises :class:`LimitExceeded` with the message, or re-raises nothing else:
    the child's state never comes back, only text. A single-threaded process forks the
    child; a threaded one (a notebook, a service calling :mod:`elastic_compile.api`), or
    one without ``fork``, starts a new interpreter instead (``call``, ``args`` and
    ``describe`` go to it pickled: module-level functions and plain data), which sets
    the same limits on itself before it renders.
    """
    if os.name == "nt":  # pragma: no cover - no rlimits and no select on pipes: the bounds hold, no hard limit
        return call(*args)
    if hasattr(os, "fork") and _single_threaded():
        return _forked(call, args, describe)
    return _spawned(call, args, describe)


def _forked(call: Callable[..., str], args: tuple[Any, ...], describe: Describe) -> str:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(read_fd)
            _limit_child(spawned=False)
            _write_all(write_fd, _answer(call, args, describe))
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        received = _read_answer(read_fd, lambda: os.kill(pid, signal.SIGKILL))
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    return _text(received, signum)


# The spawned renderer: it reads its sys.path and its work from standard input (pickled by
# the parent, which it trusts), limits itself, and writes its answer to standard output.
_CHILD = "from elastic_compile.compiler import sandbox; sandbox._spawned_child()"


def _spawned(call: Callable[..., str], args: tuple[Any, ...], describe: Describe) -> str:
    # The sys.path first, in its own pickle: the work's functions are found through it.
    payload = pickle.dumps(list(sys.path)) + pickle.dumps((call, args, describe))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        with contextlib.suppress(BrokenPipeError, LimitExceeded):  # it died or hung before it read: see below
            _write_all(child.stdin.fileno(), payload, deadline=time.monotonic() + WALL_SECONDS)
        child.stdin.close()
        received = _read_answer(child.stdout.fileno(), child.kill)
    finally:
        child.stdout.close()
        status = child.wait()
    return _text(received, -status if status < 0 else None)


def _spawned_child() -> None:
    """The spawned renderer's main (see :func:`_spawned`); exits 70 when it cannot answer."""
    code = 0
    try:
        stream = io.BytesIO(sys.stdin.buffer.read())
        sys.path[:] = pickle.load(stream)
        call, args, describe = pickle.load(stream)
        _limit_child(spawned=True)
        _write_all(sys.stdout.fileno(), _answer(call, args, describe))
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def _answer(call: Callable[..., str], args: tuple[Any, ...], describe: Describe) -> bytes:
    """The child's answer: ``{"text": ...}``, or ``{"kind": ..., "error": ...}`` for what ``call`` raised."""
    try:
        payload = {"text": call(*args)}
    except BaseException as e:  # everything becomes one message
        kind, message = describe(e)
        payload = {"kind": kind, "error": message}
    return json.dumps(payload).encode()


def _write_all(fd: int, data: bytes, *, deadline: float | None = None) -> None:
    view = memoryview(data)
    while view:
        if deadline is not None:
            _, ready, _ = select.select([], [fd], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise LimitExceeded(f"still running after {WALL_SECONDS:g} s")
        view = view[os.write(fd, view) :]


def _read_answer(fd: int, kill: Callable[[], None]) -> bytes:
    """Everything the child writes to ``fd``; kills it past the wall-clock guard or the output bound."""
    chunks: list[bytes] = []
    received = 0
    deadline = time.monotonic() + WALL_SECONDS
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            kill()
            raise LimitExceeded(f"still running after {WALL_SECONDS:g} s")
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        received += len(chunk)
        if received > 4 * MAX_OUTPUT_CHARS + 1024:  # JSON escapes at most quadruple it
            kill()
            raise LimitExceeded("the output is too large")
        chunks.append(chunk)


def _text(received: bytes, signum: int | None) -> str:
    """The child's text from its answer and the signal that ended it (None: it exited)."""
    if signum is not None:
        if signum in (signal.SIGXCPU, signal.SIGKILL):
            raise LimitExceeded(f"used more than {CPU_SECONDS} s of CPU (killed by {signal.Signals(signum).name})")
        raise LimitExceeded(f"the renderer died ({signal.Signals(signum).name})")
    try:
        payload = json.loads(received)
    except ValueError:
        raise LimitExceeded("the renderer died before it answered") from None
    if "error" in payload:
        raise LimitExceeded(str(payload["error"]))
    return str(payload["text"])


def stream_bounded(chunks: Iterable[str], limit: int = MAX_OUTPUT_CHARS) -> str:
    """Join a template's output as it streams, refusing it past ``limit`` characters."""
    out: list[str] = []
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise BoundExceeded(f"the output would be larger than {limit} characters")
        out.append(chunk)
    return "".join(out)


def environment_for(template_dir: Path, fallback: jinja2.BaseLoader, **options: Any) -> BoundedSandbox:
    """The environment for custom templates in ``template_dir``."""
    return BoundedSandbox(loader=ConfinedLoader(template_dir, fallback), **options)
