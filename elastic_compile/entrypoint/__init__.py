"""``elastic-launch``: run torch elastic inside a training container.

Import-light on purpose: only the standard library and :mod:`elastic_compile.contract` are
imported until a launch starts, then torch. Never the compiler, jinja2 or pydantic.

Public API:

* :func:`elastic_compile.entrypoint.cli.main` - the CLI, ``main(argv) -> exit code``;
* :func:`resolve_settings` - what ``elastic-launch ARGV`` would run in a given environment,
  without torch (also ``elastic-launch --dry-run``);
* :class:`LaunchSettings`, :class:`UsageError`.
"""

from elastic_compile.entrypoint.settings import LaunchSettings, UsageError, resolve_settings

__all__ = ["LaunchSettings", "UsageError", "resolve_settings"]
