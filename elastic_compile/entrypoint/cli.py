"""``elastic-launch``: the in-container entrypoint (console script ``elastic_compile.entrypoint.cli:run``).

Script mode runs a command in every worker::

    elastic-launch [options] -- python train.py --lr 1e-4

Function mode imports a function in every worker and calls it with the string arguments::

    elastic-launch [options] --function pkg.train:main [--result out.json] [-- ARGS...]

Options and environment are validated first, without torch; torch is imported only to launch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from elastic_compile import contract as c
from elastic_compile.entrypoint import report
from elastic_compile.entrypoint.resources import usable_cpus
from elastic_compile.entrypoint.scratch import apply_scratch, prepare_scratch, remove_scratch
from elastic_compile.entrypoint.settings import LaunchSettings, UsageError, parse_options, resolve_parsed

# Not `pip install 'elastic-compile[launch]'`: in an image without torch, pip would fetch the
# newest torch from PyPI, a CUDA build of several GB that may not match the image (docs/install.md).
TORCH_HINT = (
    "elastic-launch needs torch 2.12 or newer in the image: start from an image with torch, or install "
    "the torch build for its hardware (CUDA, ROCm or CPU: https://pytorch.org/get-started/locally/), "
    "then pip install --no-deps elastic-compile (docs/install.md)"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``elastic-launch`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, command = parse_options(args)
    except UsageError as e:
        return report.usage_error(str(e))
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    if opts.function is not None:
        import_path_like_python_m()
    try:
        settings = resolve_parsed(opts, command, os.environ)
    except UsageError as e:
        # The options parsed, so the termination log they name is known: report there too.
        path = c.DEFAULT_TERMINATION_LOG if opts.termination_log is None else opts.termination_log
        report.write_termination_log(path, f"{c.LAUNCHER}: error: {e}", create=opts.termination_log is not None)
        return report.usage_error(str(e))

    if settings.dry_run:
        view = settings.to_dict()
        if settings.nproc_per_node == "cpu":
            view["nproc_per_node"] = usable_cpus()
        print(json.dumps(view, indent=2))
        return 0
    if threading.current_thread() is not threading.main_thread():
        # torch installs its signal handlers only on the main thread; elsewhere a SIGTERM
        # leaves the workers orphaned (torch/distributed/elastic/multiprocessing/api.py, PContext.start).
        return report.usage_error("elastic-launch must run on the main thread")

    try:
        scratch = prepare_scratch(settings.log_dir, os.environ)
    except UsageError as e:
        report.write_termination_log(
            settings.termination_log, f"{c.LAUNCHER}: error: {e}", create=settings.termination_log_create
        )
        return report.usage_error(str(e))
    apply_scratch(scratch, os.environ)
    for note in scratch.notes:
        report.say(note)
    settings = dataclasses.replace(settings, log_dir=scratch.log_dir)

    try:
        return _launch(settings)
    finally:
        remove_scratch(scratch)


def _launch(settings: LaunchSettings) -> int:
    try:
        # Imports torch (seconds): only now that the options and env are known to be good.
        from elastic_compile.entrypoint.launch import run_launch
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "torch":
            raise
        return report.usage_error(f"torch is not installed; {TORCH_HINT}")
    except ImportError as e:
        return report.usage_error(f"torch cannot be imported ({e}); {TORCH_HINT}")
    return run_launch(settings)


def import_path_like_python_m() -> None:
    """Put the working directory first on ``sys.path``, as ``python -m`` does.

    The console script starts with only its own bin directory there, so ``--function
    train:main`` next to the container's ``workingDir`` was not found and every pod exited 2.
    ``python -m elastic_compile.entrypoint`` already has it; ``-P``/``PYTHONSAFEPATH``
    turn it off, for both. Spawned workers inherit the agent's ``sys.path`` (multiprocessing
    sends it along), forked ones share it.
    """
    if sys.flags.safe_path:
        return
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def run() -> NoReturn:
    """Console-script entry point."""
    sys.exit(main())
