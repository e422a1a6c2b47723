"""``elastic-launch``: the in-container entrypoint (console script ``elastic_compile.entrypoint.cli:run``).

Script mode runs a command in every worker::

    elastic-launch [options] -- python train.py --lr 1e-4

Function mode imports a function in every worker and calls it with the string arguments::

    elastic-launch [options] --function pkg.train:main [--result out.json] [-- ARGS...]

Options and environment are validated first, without torch; torch is imported only to launch.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from elastic_compile import contract as c
from elastic_compile.entrypoint import report
from elastic_compile.entrypoint.resources import usable_cpus
from elastic_compile.entrypoint.settings import UsageError, parse_options, resolve_parsed

TORCH_HINT = "pip install 'elastic-compile[launch]'"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``elastic-launch`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, command = parse_options(args)
    except UsageError as e:
        return report.usage_error(str(e))
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
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
        # leaves the workers orphaned (torch-elastic.md §10).
        return report.usage_error("elastic-launch must run on the main thread")

    try:
        # Imports torch (seconds): only now that the options and env are known to be good.
        from elastic_compile.entrypoint.launch import run_launch
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "torch":
            raise
        return report.usage_error(f"torch is not installed; install it with: {TORCH_HINT}")
    except ImportError as e:
        return report.usage_error(f"torch cannot be imported ({e}); reinstall it with: {TORCH_HINT}")
    return run_launch(settings)


def run() -> NoReturn:
    """Console-script entry point."""
    sys.exit(main())
