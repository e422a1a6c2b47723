"""``elastic-compile``: the command line.

Exit codes: 0 ok, 1 ``--check`` found drift, 2 bad input (one located line per problem,
no traceback unless ``--debug``), 3 an internal error (a bug: please report it).
YAML goes to stdout, diagnostics to stderr, and nothing is half-written.

A command imports only what it needs: ``--version`` nothing, ``schema`` the spec models
(no Jinja), ``import`` and ``doctor`` their own modules; compiling imports the pipeline.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from elastic_compile import __version__

if TYPE_CHECKING:
    from elastic_compile.compiler.diagnostics import Reporter
    from elastic_compile.compiler.writer import Drift
    from elastic_compile.core.errors import Problem

EXIT_OK, EXIT_DRIFT, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        from elastic_compile.core.errors import Problem, SpecError

        raise SpecError([Problem("elastic-compile", 0, 0, "usage", message)])


class _TargetChoices:
    """``-t``'s choices, asked for only when used.

    A built-in or registered name is accepted without importing any target or reading the
    installed distributions' entry points (most of what building the list costs a one-spec
    compile); listing them all (``--help``, a usage error) loads every target.
    """

    def __contains__(self, name: object) -> bool:
        from elastic_compile import targets
        from elastic_compile.compiler.pipeline import ALL

        return name == ALL or (isinstance(name, str) and targets.exists(name))

    def __iter__(self) -> Iterator[str]:
        from elastic_compile import targets
        from elastic_compile.compiler.pipeline import ALL

        return iter([*targets.names(), ALL])


class _Help(argparse.HelpFormatter):
    """Help whose ``%(summaries)s`` is every target's one-line summary, made only when help is printed."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text is not None and "%(summaries)s" in text:
            from elastic_compile import targets

            # The summaries are spliced in before argparse's own %-formatting, so a % in one is escaped.
            summaries = "; ".join(f"{name}: {targets.get(name).summary}" for name in targets.names())
            text = text.replace("%(summaries)s", summaries.replace("%", "%%"))
        return text


def _parser() -> argparse.ArgumentParser:
    from elastic_compile.compiler import output

    p = _Parser(
        prog="elastic-compile",
        formatter_class=_Help,
        description="Compile elastic.yaml into validated manifests: a Kubeflow PyTorchJob (v1) or TrainJob "
        "(Trainer v2), a PodTemplate, a Flyte 1 task or Flyte 2 TaskEnvironment settings.",
        epilog="Other commands: 'elastic-compile schema' prints the JSON Schema of elastic.yaml; "
        "'elastic-compile import MANIFEST' writes an elastic.yaml for a PyTorchJob written by hand "
        "('import --torchrun -- torchrun ...' for a command line); "
        "'elastic-compile doctor MANIFEST...' finds the known traps in manifests written by hand; "
        "'elastic-compile run SPEC_OR_MANIFEST' runs the job on this machine, one process per pod; "
        "'elastic-compile apply SPEC...' sends the compiled objects to your cluster (a server-side dry run of "
        "every object, then server-side apply).",
    )
    # nargs="*": with -o, `--check spec.yaml` may have taken the only spec (see _compile).
    p.add_argument(
        "specs",
        nargs="*",
        metavar="SPEC",
        help="elastic.yaml files, or directories: every elastic.yaml and *.elastic.yaml below, in path order "
        "(_*.elastic.yaml are bases: checked, never compiled on their own); - reads standard input",
    )
    p.add_argument(
        "-t",
        "--target",
        choices=_TargetChoices(),
        default=None,
        # A metavar, so that argparse never lists the choices (loading every target) unless asked.
        metavar="TARGET",
        help="what to emit (default: the spec's target, else pytorchjob): %(summaries)s; all: the spec's job (the "
        "TrainJob when its target is trainjob, else the PyTorchJob), the PodTemplate and, with a flyte: section, "
        "the Flyte 1 task; never flyte2 (ask for it with -t flyte2)",
    )
    p.add_argument("--format", choices=["yaml", "json"], default="yaml", help="output format (default: yaml)")
    p.add_argument(
        "-o",
        "--output",
        type=_output_directory,
        metavar="DIR",
        help="write one file per resource and a kustomization.yaml into DIR, all or nothing (several specs: "
        "DIR/<namespace>/<name>/ each, DIR/<name>/ for a spec without a namespace); replaces and removes only "
        f"the files it wrote, which {output.MANIFEST} lists",
    )
    p.add_argument(
        "--check",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="compare with what is on disk (the -o DIR, else FILE) and exit 1 with a diff if stale; never writes",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="print the resolved spec: every value, default and where it came from",
    )
    p.add_argument("--templates", type=Path, metavar="DIR", help="templates that replace the built-in ones")
    p.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="the bases specs extend, and -o and --check paths written inside DIR, stay inside DIR, never through "
        "a symbolic link leading out of it; a path written outside it is your choice (default: the git working "
        "tree of the current directory, else the current directory)",
    )
    p.add_argument("--strict", action="store_true", help="treat lint warnings as errors (exit 2, nothing written)")
    p.add_argument(
        "--ignore", action="append", default=[], metavar="CODE", help="silence lint CODE, e.g. EC104 (repeatable)"
    )
    _message_format(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"elastic-compile {__version__}")
    return p


#: Words kubectl takes after -o (an output format; ``-`` for standard output): here they would
#: name a new directory and print nothing. The rest of kubectl's formats (``kubectl get --help``)
#: have no counterpart here. Compared in lower case, and before a ``=`` (``jsonpath={.kind}``).
FORMAT_WORDS = {"json": "use --format json", "yaml": "use --format yaml", "yml": "use --format yaml"}
KUBECTL_FORMATS = frozenset({
    "wide", "name", "kyaml", "go-template", "go-template-file", "template", "templatefile", "jsonpath",
    "jsonpath-file", "jsonpath-as-json", "custom-columns", "custom-columns-file",
})  # fmt: skip


def _output_directory(text: str) -> Path:
    """``-o DIR``'s value: a directory, never a kubectl output format (``-o json``) or ``-``."""
    word = text.partition("=")[0].lower()
    if text == "-":
        advice = "standard output is the default: leave out -o"
    elif word in FORMAT_WORDS:
        advice = f"for {word} on standard output {FORMAT_WORDS[word]}"
    elif word in KUBECTL_FORMATS:
        advice = f"kubectl's -o {word} has no counterpart: the output is YAML (--format json for JSON)"
    else:
        return Path(text)
    raise argparse.ArgumentTypeError(
        f"{text}: -o names the directory of a kustomize base, not an output format; {advice} "
        f"(a directory of that name: -o ./{text})"
    )


def _message_format(p: argparse.ArgumentParser) -> None:
    from elastic_compile.compiler.diagnostics import FORMATS

    p.add_argument(
        "--message-format",
        choices=FORMATS,
        default="text",
        help="how errors, lints and findings print: text (file:line:col: field: message), json (one object per "
        "line, docs/lints.md) or github (GitHub Actions workflow commands: annotations on the pull request)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list == ["--version"]:  # what argparse would print, without importing the compiler
        sys.stdout.write(f"elastic-compile {__version__}\n")
        return EXIT_OK
    return _main(args_list)


def _main(args_list: list[str]) -> int:
    """The command, run in this process."""
    from elastic_compile.core.errors import CompileError, SpecError

    debug = wants_debug(args_list)
    if sys.stdout is None:  # started with standard output closed (>&-)
        sys.stdout = _ClosedOutput()
    if sys.stderr is None:  # started with standard error closed (2>&-): what it would say is lost,
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- not written into standard output instead
    # Manifests are UTF-8 whatever the locale: in LC_ALL=C a non-ASCII label must not crash.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8")
    try:
        with _without_pydantic_plugins(args_list):
            code = _command(args_list)
        sys.stdout.flush()  # a reader that is gone shows here, not after the exit code is decided
        return code
    # --debug adds the traceback and changes nothing else: bad input still exits 2, a bug 3.
    except SpecError as e:
        if debug:
            _traceback()
        _reporter(args_list).problems(e.problems)
        return EXIT_INPUT
    except CompileError as e:
        if debug:
            _traceback()
        _reporter(args_list).error(str(e))
        return EXIT_INPUT
    except Exception as e:
        if debug:
            _traceback()
        if isinstance(e, BrokenPipeError) and _reader_gone():
            _end_by_sigpipe()
        if isinstance(e, OSError) and isinstance(sys.stdout, _ClosedOutput):
            _reporter(args_list).error("standard output is closed; give -o DIR, or a file to print to")
            return EXIT_INPUT
        if isinstance(e, FileNotFoundError) and not _cwd_exists():
            _reporter(args_list).error("the current directory no longer exists; run from one that does")
            return EXIT_INPUT
        writer = sys.modules.get("elastic_compile.compiler.writer")  # a WriteError comes from there only
        if writer is not None and isinstance(e, writer.WriteError):
            for line in e.lines:  # a path may hold bytes that are not UTF-8: printed escaped
                _reporter(args_list).error(line)
            return EXIT_INPUT
        if diagnostics_format(args_list) != "text":
            _reporter(args_list).error(
                f"internal error: {type(e).__name__}: {e} (rerun with --debug and report it)", code="internal"
            )
            return EXIT_INTERNAL
        print(
            f"elastic-compile: internal error: {type(e).__name__}: {e} (rerun with --debug and report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _traceback() -> None:
    import traceback  # only under --debug: not worth its import time on every run

    traceback.print_exc(file=sys.stderr)


def _command(args_list: list[str]) -> int:
    if args_list[:1] == ["schema"]:
        return _schema(args_list[1:])
    if args_list[:1] == ["import"]:
        return _import(args_list[1:])
    if args_list[:1] == ["doctor"]:
        return _doctor(args_list[1:])
    if args_list[:1] == ["completion"]:
        return _completion(args_list[1:])
    if args_list[:1] == ["apply"]:
        return _apply(args_list[1:])
    if args_list[:1] == ["run"]:
        from elastic_compile.localrun.cli import main as run_main

        return run_main(args_list[1:])
    _refuse_unknown_command(args_list)
    return _compile(_parser().parse_args(args_list))


#: The commands besides compiling (the first word of the command line).
COMMANDS = ("schema", "import", "doctor", "run", "completion", "apply")


def _refuse_unknown_command(args_list: Sequence[str]) -> None:
    """A first word that names no file and looks like a command (``improt``) is a typo, not a spec.

    Read as a spec it would report a file that cannot be read, which hides the typo. A word
    with a path separator or a dot, or one that exists, is a path as before.
    """
    word = args_list[0] if args_list else ""
    if not word.isidentifier() or os.path.lexists(word):
        return
    import difflib

    from elastic_compile.core.errors import Problem, SpecError

    if word in _OPTION_WORDS:
        hint = f"{_OPTION_WORDS[word]} "
    else:
        close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
    message = f"{word}: no such command or file; {hint}commands: {', '.join(COMMANDS)}; a spec is a file (elastic.yaml)"
    raise SpecError([Problem("elastic-compile", 0, 0, "usage", message)])


def diagnostics_format(argv: Sequence[str]) -> str:
    """The ``--message-format`` of a command line, read before it is parsed (``text`` by default)."""
    from elastic_compile.compiler.diagnostics import wanted

    return wanted(argv)


def _reporter(argv: Sequence[str]) -> Reporter:
    from elastic_compile.compiler.diagnostics import Reporter

    return Reporter(diagnostics_format(argv))


@contextmanager
def _without_pydantic_plugins(args_list: Sequence[str]) -> Iterator[None]:
    """No pydantic plugin sees our spec models while a command other than ``run`` runs.

    pydantic looks for plugins (its documented ``PYDANTIC_DISABLE_PLUGINS`` turns that off)
    by reading the entry points of every installed distribution when it builds the first
    validator: about 37 M instructions of a cold compile in a development environment of
    177 distributions. A plugin may also wrap validation, and the output must not depend
    on what else is installed beside the compiler. A value the user set is kept; ``run``
    starts the job's processes, which inherit the environment, so it is left alone there,
    and the environment is as it was once the command is done (tests call :func:`main`).
    """
    if args_list[:1] == ["run"] or "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        yield
        return
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    try:
        yield
    finally:
        os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)


def wants_debug(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for tracebacks: ``--debug``, or a prefix of it that argparse takes for it."""
    return any(len(word) >= 3 and "--debug".startswith(word) for word in argv)


class _ClosedOutput(io.TextIOBase):
    """Standard output when the command started without one: printing to it is an error, not a crash."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reader went away (``| head``)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no descriptor (a StringIO in a test)
        return False


def _end_by_sigpipe() -> None:
    """End as a tool writing to a closed pipe ends: by SIGPIPE, which the shell reports as 141.

    Nothing more can reach the reader; standard output goes to /dev/null first so that the
    interpreter's last flush of it cannot fail again.
    """
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def _schema_parser() -> argparse.ArgumentParser:
    return _Parser(prog="elastic-compile schema", description="Print the JSON Schema of elastic.yaml.")


def _completion_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="elastic-compile completion",
        description="Print a shell completion script for elastic-compile, generated from its argument parsers. "
        "bash: elastic-compile completion bash > ~/.local/share/bash-completion/completions/elastic-compile; "
        "zsh: elastic-compile completion zsh > a directory on $fpath, as _elastic-compile; "
        "fish: elastic-compile completion fish > ~/.config/fish/completions/elastic-compile.fish",
    )
    p.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell the script is for")
    return p


def _completion(argv: Sequence[str]) -> int:
    from elastic_compile.compiler.completion import script

    ns = _completion_parser().parse_args(list(argv))
    sys.stdout.write(script(ns.shell))
    return EXIT_OK


def _schema(argv: Sequence[str]) -> int:
    import json

    from elastic_compile.schema import json_schema

    _schema_parser().parse_args(list(argv))
    sys.stdout.write(json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK


def _import_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="elastic-compile import",
        description="Print an elastic.yaml for a job written by hand: a PyTorchJob or TrainJob manifest (or a "
        "stream of them, - for standard input), or a torchrun command line (--torchrun -- torchrun ARGS...). What the "
        "import changed and what it could not carry go to stderr, one located line each.",
    )
    p.add_argument("manifest", nargs="?", metavar="MANIFEST", help="a manifest file; - reads standard input")
    p.add_argument("--torchrun", action="store_true", help="import the torchrun command line after --")
    p.add_argument("--image", help="with --torchrun: the container image (a command line has none)")
    p.add_argument("--name", help="with --torchrun: the job name (default: the script's name)")
    p.add_argument(
        "--entrypoint",
        metavar="WORDS",
        help="the image's ENTRYPOINT, in shell words (e.g. 'python /opt/train.py'), for a training container "
        "without command: the manifest does not show what it runs",
    )
    _message_format(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _import(argv: Sequence[str]) -> int:
    from elastic_compile.compiler import importer
    from elastic_compile.compiler.diagnostics import Reporter
    from elastic_compile.core.errors import Problem, SpecError

    words = list(argv)
    command: list[str] | None = None
    if "--torchrun" in words:
        at = words.index("--torchrun")
        rest = words[at + 1 :]
        if "--" not in rest:
            raise SpecError(
                [
                    Problem(
                        "elastic-compile",
                        0,
                        0,
                        "usage",
                        "--torchrun takes the command after --: --torchrun -- torchrun ...",
                    )
                ]
            )
        split = rest.index("--")
        words, command = words[:at] + rest[:split], rest[split + 1 :]
    ns = _import_parser().parse_args(words + (["--torchrun"] if command is not None else []))
    if command is not None:
        if ns.manifest is not None:
            raise SpecError([Problem("elastic-compile", 0, 0, "usage", "give a MANIFEST or --torchrun, not both")])
        results = [importer.import_torchrun(command, image=ns.image, name=ns.name)]
    elif ns.manifest is None:
        raise SpecError(
            [Problem("elastic-compile", 0, 0, "usage", "give a MANIFEST (- for standard input) or --torchrun -- ...")]
        )
    else:
        if ns.image is not None or ns.name is not None:
            raise SpecError([Problem("elastic-compile", 0, 0, "usage", "--image and --name go with --torchrun")])
        entrypoint = None
        if ns.entrypoint is not None:
            import shlex  # import --entrypoint only

            try:
                entrypoint = shlex.split(ns.entrypoint)
            except ValueError as e:
                raise SpecError([Problem("elastic-compile", 0, 0, "usage", f"--entrypoint: {e}")]) from e
            if not entrypoint:
                raise SpecError([Problem("elastic-compile", 0, 0, "usage", "--entrypoint: give the program to run")])
        results = importer.import_path(ns.manifest, entrypoint=entrypoint)
    reporter = Reporter(ns.message_format)
    for result in results:
        for note in sorted(result.notes, key=lambda n: (n.file, n.line, n.col)):  # in file order, as errors
            reporter.problem(note)  # a Problem prints escaped
    sys.stdout.write("---\n".join(r.text for r in results))
    return EXIT_OK


def _doctor_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="elastic-compile doctor",
        description="Find the known traps in manifests we did not write (PyTorchJobs and TrainJobs in any YAML stream, "
        "- for standard input, e.g. kubectl kustomize output): one located line per finding with a stable "
        "code (DRxxx, docs/adopting.md). Exit 1 when anything is found.",
    )
    p.add_argument("manifests", nargs="+", metavar="MANIFEST", help="manifest files; - reads standard input")
    _message_format(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _doctor(argv: Sequence[str]) -> int:
    from elastic_compile.compiler import doctor
    from elastic_compile.compiler.diagnostics import Reporter
    from elastic_compile.core.errors import SpecError, printable

    ns = _doctor_parser().parse_args(list(argv))
    reporter = Reporter(ns.message_format)
    found = False
    unreadable: list[Problem] = []
    for path in ns.manifests:
        try:
            (report,) = doctor.doctor_paths([path])
        except SpecError as e:  # the other files are still checked; exit 2 at the end
            unreadable += e.problems
            continue
        for problem in report.problems:
            found = True
            reporter.problem(problem, stream=sys.stdout)  # printed escaped: names and values come from the manifest
        if not report.jobs:
            shown = "<stdin>" if path == "-" else path  # as the findings in it are located
            if ns.message_format == "text":
                print(printable(f"elastic-compile doctor: {shown}: no {doctor.kinds()} to check"), file=sys.stderr)
            else:
                reporter.note(f"doctor: {shown}: no {doctor.kinds()} to check")
    if unreadable:
        raise SpecError(unreadable)
    return EXIT_DRIFT if found else EXIT_OK


def _apply_parser() -> argparse.ArgumentParser:
    from elastic_compile import targets

    p = _Parser(
        prog="elastic-compile apply",
        description="Compile the specs and send the objects to the cluster of your kubeconfig, as kubectl apply "
        "--server-side does: a server-side dry run of every object first (schemas, CEL, the operators' webhooks), "
        "then, when all pass, a server-side apply under the field manager elastic-compile. One line per object on "
        "stdout; each refusal or warning of the server located at the spec on stderr. Exit 1 when the server "
        "refuses or cannot be reached. Needs the kubernetes package: pip install 'elastic-compile[cluster]'.",
    )
    p.add_argument("specs", nargs="+", metavar="SPEC", help="elastic.yaml files, or directories (as when compiling)")
    p.add_argument(
        "-t",
        "--target",
        # The targets whose output is Kubernetes objects (the Flyte ones are not).
        choices=tuple(t.name for t in targets.every() if t.resources),
        help="what to apply (default: the spec's target, else pytorchjob)",
    )
    p.add_argument(
        "--dry-run",
        choices=("none", "server"),
        default="none",
        help="server: only the server-side dry run, nothing is stored (kubectl's --dry-run=server)",
    )
    p.add_argument(
        "-n",
        "--namespace",
        type=_namespace,
        help="the namespace of a spec without one (default: the context's); a DNS-1123 label, as kubectl checks",
    )
    p.add_argument("--kubeconfig", help="the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="the kubeconfig context (default: its current one)")
    p.add_argument("--field-manager", default="elastic-compile", help="the field manager (default: elastic-compile)")
    p.add_argument(
        "--force-conflicts", action="store_true", help="take over fields another field manager owns (as kubectl)"
    )
    p.add_argument(
        "--request-timeout",
        type=_request_timeout,
        default=None,
        metavar="DURATION",
        help="how long to wait for the server's answer to one request, e.g. 30s, 2m or 45 (seconds); 0: no limit "
        "(kubectl's flag). Default: 60s. Connecting waits at most 10s in any case; nothing is retried",
    )
    p.add_argument("--root", type=Path, help="where specs and their bases may be read (as when compiling)")
    _message_format(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _namespace(text: str) -> str:
    """``-n``'s value: a namespace is a DNS-1123 label, so it can never add a segment to a request's path."""
    from elastic_compile.core.errors import show_given
    from elastic_compile.core.names import DNS1123_LABEL_MAX, is_dns1123_label

    if not is_dns1123_label(text):
        raise argparse.ArgumentTypeError(
            f"a namespace is a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter "
            f"or digit, at most {DNS1123_LABEL_MAX} characters (given: {show_given(text)})"
        )
    return text


def _request_timeout(text: str) -> float:
    """``--request-timeout``'s value in seconds: ``45``, ``30s``, ``2m``, ``1m30s``; 0 for no limit."""
    from elastic_compile.contract_values import parse_duration
    from elastic_compile.core.errors import show_given

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e}; 0 for no limit (given: {show_given(text)})") from None


def _apply(argv: Sequence[str]) -> int:
    from elastic_compile.compiler import inputs, lint, output
    from elastic_compile.compiler.diagnostics import Reporter
    from elastic_compile.compiler.pipeline import Compiled, compile_path, resolver, unique_problems
    from elastic_compile.core.errors import Problem, SpecError

    ns = _apply_parser().parse_args(list(argv))
    try:
        import kubernetes  # noqa: F401 -- only to say what is missing before compiling
    except ImportError as e:
        raise SpecError(
            [
                Problem(
                    "elastic-compile",
                    0,
                    0,
                    "usage",
                    "apply needs the kubernetes package: pip install 'elastic-compile[cluster]'",
                )
            ]
        ) from e
    boundary = output.default_boundary(ns.root)
    found = inputs.collect(ns.specs, boundary.root)
    bases = resolver(boundary)
    compiled: list[Compiled] = []
    problems: list[Problem] = list(found.problems)
    for path in found.jobs:
        try:
            compiled.append(compile_path(path, None if ns.target is None else (ns.target,), None, bases))
        except SpecError as e:
            problems.extend(e.problems)
    if problems:
        raise SpecError(unique_problems(problems))
    if not compiled:
        raise SpecError([Problem("elastic-compile", 0, 0, "usage", "no job to apply: only bases were found")])
    reporter = Reporter(ns.message_format)
    lint.report(compiled, (), strict=False, reporter=reporter)
    from elastic_compile.compiler import apply

    return apply.run(
        compiled,
        kubeconfig=ns.kubeconfig,
        context=ns.context,
        namespace=ns.namespace,
        dry_run=ns.dry_run == "server",
        field_manager=ns.field_manager,
        force_conflicts=ns.force_conflicts,
        request_timeout=apply.REQUEST_TIMEOUT if ns.request_timeout is None else ns.request_timeout,
        reporter=reporter,
    )


def _compile(ns: argparse.Namespace) -> int:
    from elastic_compile import api
    from elastic_compile.compiler import inputs, lint, output, writer
    from elastic_compile.compiler.diagnostics import Progress, Reporter, counted
    from elastic_compile.compiler.pipeline import Compiled, resolver, unique_problems
    from elastic_compile.core.errors import Problem, SpecError

    if ns.output is not None and ns.check:
        # With -o, --check compares with DIR and takes no FILE: in `-o DIR --check spec.yaml`
        # the word after --check is a spec (argparse's optional value took it).
        ns.specs.insert(0, ns.check)
        ns.check = ""
    if not ns.specs:
        if ns.check:
            # `--check job.yaml` alone: argparse's optional value took the only word.
            message = (
                f"--check {ns.check} compares what SPEC compiles to with that file: give the spec too "
                f"(elastic-compile SPEC --check {ns.check}), or -o DIR to compare a directory"
            )
        else:
            message = "the following arguments are required: SPEC"
        raise SpecError([Problem("elastic-compile", 0, 0, "usage", message)])
    _refuse_bad_combinations(ns)
    reporter = Reporter(ns.message_format)
    boundary = output.default_boundary(ns.root)
    found = inputs.collect(ns.specs, boundary.root)
    for note in found.notes:
        reporter.note(note)
    # A run of several specs ends with one line saying what it did (one spec says it all already).
    big = len(found.jobs) + len(found.bases) > 1

    def summary(what: str) -> None:
        if big:
            bases_too = f" and {counted(len(found.bases), 'base')}" if found.bases else ""
            reporter.summary(
                f"{counted(len(found.jobs), 'spec')}{bases_too}, {what}, {counted(reporter.warnings, 'warning')}, "
                f"{counted(reporter.errors, 'error')}"
            )

    bases = resolver(boundary)  # one for the run: a base shared by many specs is read once
    compiled: list[Compiled] = []
    problems: list[Problem] = list(found.problems)
    progress = Progress(len(found.jobs), fmt=ns.message_format)
    for done, path in enumerate(found.jobs, 1):
        try:
            compiled.append(api.compile_file(path, ns.target, templates=ns.templates, bases=bases))
        except SpecError as e:
            problems.extend(e.problems)
        progress.step(done)
    progress.clear()
    for path in found.bases:
        problems.extend(bases.base_problems(path))
    if problems:
        if ns.debug:
            raise SpecError(unique_problems(problems))
        reporter.problems(SpecError(unique_problems(problems)).problems)  # at most MAX_PROBLEMS per file
        summary("nothing written")
        return EXIT_INPUT
    if not compiled and (ns.output is not None or ns.check is not None):
        raise SpecError(
            [Problem("elastic-compile", 0, 0, "usage", "no job to compile: only bases (_*.elastic.yaml) were found")]
        )
    if lint.report(compiled, ns.ignore, strict=ns.strict, reporter=reporter):  # --strict and one fired
        summary("nothing written")
        return EXIT_INPUT
    if ns.explain:
        from elastic_compile.compiler.explain import explain

        sys.stdout.write("".join(explain(c) for c in compiled))
        return EXIT_OK
    if ns.output is not None:
        # No spec and no base may be inside DIR: a base is an input of every spec extending it.
        read = list(
            dict.fromkeys([*found.jobs, *found.bases, *(f for c in compiled if c.loaded for f in c.loaded.chain)])
        )
        try:
            files = output.directory_files(compiled, ns.format, nested=found.directories)
        except SpecError as e:  # two jobs would share a directory: said, and the run's summary still ends it
            reporter.problems(e.problems)
            summary("nothing written")
            return EXIT_INPUT
        try:
            if ns.check is not None:
                drift = writer.diff_directory(ns.output, files, boundary=boundary, specs=read)
                foreign, counts = drift.foreign, drift.counts
                if foreign:
                    # Named, never read: they are not ours, so never drift either.
                    shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
                    reporter.note(f"not written by elastic-compile, left alone: {shown}")
                code = _report_drift(drift, reporter)
                stale = counts.changed + counts.removed
                summary(f"{counted(stale, 'file')} stale, {counts.unchanged} current")
                return code
            counts = writer.write_directory(ns.output, files, boundary=boundary, specs=read)
        except writer.WriteError as e:
            for line in e.lines:
                reporter.error(line)
            summary("nothing written")
            return EXIT_INPUT
        removed = f", {counts.removed} removed" if counts.removed else ""
        summary(f"{counted(counts.changed, 'file')} written to {ns.output}, {counts.unchanged} unchanged{removed}")
        return EXIT_OK
    text = output.stream_text(compiled, ns.format)
    if ns.check:
        return _report_drift(writer.diff_file(Path(ns.check), text, boundary=boundary), reporter)
    if ns.check is not None:
        raise SpecError([Problem("elastic-compile", 0, 0, "usage", "--check needs -o DIR or a FILE")])
    sys.stdout.write(text)
    summary("printed to standard output")
    return EXIT_OK


def _refuse_bad_combinations(ns: argparse.Namespace) -> None:
    """Options that would be accepted and then do nothing (red team 18, 19): one usage line each, all of them."""
    from elastic_compile.core.errors import Problem, SpecError

    problems = []
    if ns.root is not None and not ns.root.is_dir():
        problems.append(f"--root {ns.root}: not a directory")
    if ns.explain and (ns.output is not None or ns.check is not None):
        problems.append("--explain prints the resolved spec to standard output; it writes no -o DIR and checks nothing")
    if ns.explain and ns.format != "yaml":
        problems.append(f"--explain prints text; --format {ns.format} is for the manifests")
    for word in ns.specs:
        hint = _command_hint(word)
        if hint is not None:
            problems.append(hint)
    if problems:
        raise SpecError([Problem("elastic-compile", 0, 0, "usage", message) for message in problems])


#: Words a user may type for what is an option here, and what to say.
_OPTION_WORDS = {
    "explain": "did you mean --explain?",
    "check": "did you mean --check?",
    "help": "did you mean --help?",
    "version": "did you mean --version?",
    "compile": "compiling needs no command: elastic-compile SPEC.",
}


def _command_hint(word: str) -> str | None:
    """A word among the specs that names no file and looks like a command (``improt``), with what to type."""
    if not word.isidentifier() or os.path.lexists(word):
        return None
    import difflib

    close = difflib.get_close_matches(word, [*COMMANDS, *_OPTION_WORDS], n=1, cutoff=0.6)
    if not close:
        return None
    hint = _OPTION_WORDS.get(close[0], f"did you mean elastic-compile {close[0]} (a command goes first)?")
    return f"{word}: no such command or file; {hint} A spec is a file (elastic.yaml)"


def _report_drift(drift: Drift, reporter: Reporter) -> int:
    """The diff on stdout; in ``text`` one line saying so, in ``json`` and ``github`` one error per stale file
    (an annotation GitHub can put on that file)."""
    from elastic_compile.core.errors import Problem

    if not drift.diff:
        return EXIT_OK
    sys.stdout.write(drift.diff)
    if reporter.format == "text":
        reporter.status(
            "the files on disk are stale; rerun without --check to update them", severity="error", code="stale"
        )
        return EXIT_DRIFT
    for stale in drift.stale:
        change = {
            "created": "a write would create it",
            "removed": "a write would remove it (no spec emits it any more)",
        }.get(stale.what, f"a write would change it from line {stale.line}")
        message = f"stale: {change}; rerun without --check to update it"
        reporter.problem(Problem(stale.path, stale.line, 1, "status", message, code="stale"))
    return EXIT_DRIFT


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
