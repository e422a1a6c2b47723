"""The function-mode trampoline that every worker runs.

``elastic_launch`` hands its entrypoint to ``multiprocessing``, which pickles functions by
reference (module + qualified name) under ``spawn`` and ``forkserver``
(torch/distributed/elastic/multiprocessing/api.py). The user's target is therefore passed as a string and resolved here,
in the worker, by a module-level function that always pickles.
"""

from __future__ import annotations

import importlib
import signal
from collections.abc import Callable
from typing import Any


def load_function(target: str) -> Callable[..., Any]:
    """Import ``module:attr.path`` and return the callable it names."""
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def call_function(target: str, *args: str) -> Any:
    """Run ``target(*args)`` in a worker and return its value to the agent.

    The call runs under torch's ``record`` so that an exception writes its message and
    traceback to ``$TORCHELASTIC_ERROR_FILE``, where the agent reads the root cause
    (torch/distributed/elastic/multiprocessing/errors/__init__.py). torch's worker wrapper applies ``record`` as well
    today; doing
    it here keeps the report from depending on that private detail.
    """
    # Imported in the worker, so that importing this module (the agent does) stays light.
    from torch.distributed.elastic.multiprocessing.errors import record

    reset_signal_handlers()
    return record(_call_checked)(target, *args)


def _call_checked(target: str, *args: str) -> Any:
    """``target(*args)``, failing here, under ``record``, if the agent could not receive its value.

    torch sends the value through a multiprocessing queue after ``record`` has returned
    (``_wrap`` in torch/distributed/elastic/multiprocessing/api.py): a value that does not
    pickle failed there, with no error file, and the report advised wrapping main in
    ``record``, which it was.
    """
    # Imported here: multiprocessing's modules register __mp_main__, which the agent's light
    # import path must not (tests/entrypoint/test_launch_cli.py).
    from multiprocessing.reduction import ForkingPickler

    value = load_function(target)(*args)
    try:
        ForkingPickler.dumps(value)  # what the queue does with it
    except Exception as e:
        raise TypeError(
            f"{target} returned a {type(value).__name__}, which cannot be sent to the agent ({type(e).__name__}: {e}); "
            "return plain data (numbers, strings, lists, dicts) or None"
        ) from None  # the pickler's own error is in the message
    return value


def reset_signal_handlers() -> None:
    """Give the worker the signal dispositions of a fresh interpreter.

    A ``fork`` worker inherits the agent's Python handlers, which raise ``SignalException``
    and only run when the interpreter regains control. A worker blocked in a C++ collective
    (gloo waiting for a dead peer) then ignores SIGTERM until SIGKILL, and torch stops a
    failed group with a fixed 30 s grace, not ``shutdown_timeout``
    (``MultiprocessContext._poll`` and ``_stop_workers`` call ``close()`` with defaults).
    Measured: a restart took 34 s under fork instead of about 3. A spawned worker starts
    with these defaults; the user's function may still install its own handlers.
    """
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
