"""Write the files of ``-o DIR`` as their owner, and diff them for ``--check``.

``-o DIR`` owns only what it wrote. DIR holds a small manifest, :data:`MANIFEST`, naming
the files elastic-compile wrote there; a run replaces those, removes those it no longer
emits, and never touches anything else. A manifest rather than a marker inside each file,
because ownership must be decided without reading other people's files (``--check`` never
prints or compares them), because JSON files (``openapi.json``, ``--format json``) have no
comments to carry a marker, and because it also names the files a run stopped emitting,
so they can be removed.

A file at a path we would write that is not ours is refused (one line, exit 2) unless it
already holds exactly the bytes we would write (nothing can be lost by taking it over: how
a base written before the manifest existed is adopted). DIR itself is refused when it holds
a spec being compiled or a ``.git``, when it is inside a ``.git``, or when it is the working
tree or one of its ancestors. A DIR inside the boundary of :mod:`elastic_compile.core.safefs`
as written is reached without a symbolic link leading out of it; a DIR outside it as written
is the command line's own choice (as a spec named there is), reached as written; in either
case no symbolic link inside DIR is followed.

Writes are all-or-nothing: every new file is first written to a temporary file beside its
target, then each is renamed into place (the old file kept as a hard link until the end);
a failure at any point puts every old file back and removes what was added.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from pathlib import Path, PurePosixPath
from typing import Final, NamedTuple

from elastic_compile.core import safefs

#: The manifest of the files elastic-compile owns in an ``-o`` directory.
MANIFEST: Final = ".elastic-compile-owned"
_MANIFEST_HEADER: Final = (
    "# Written by elastic-compile: the files it owns in this directory, one per line.\n"
    "# It replaces and removes only these; everything else here is yours. Do not edit.\n"
)
# Entries of DIR we look at, at most: a hostile directory may hold millions.
_MAX_ENTRIES: Final = 10_000


class WriteError(Exception):
    """The output directory could not be written (or checked); one line per problem."""

    def __init__(self, lines: str | Sequence[str]) -> None:
        """``lines``: one problem, or several (each printed on its own line)."""
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


def manifest_text(owned: Sequence[str]) -> str:
    """The manifest naming ``owned`` (sorted, so the bytes never vary)."""
    return _MANIFEST_HEADER + "".join(f"{name}\n" for name in sorted(owned))


# --------------------------------------------------------------------------- the plan


class _Plan:
    """What a run would do in DIR, worked out without changing anything."""

    __slots__ = ("changes", "foreign", "problems", "removals", "shown")

    def __init__(self, shown: str) -> None:
        self.shown = shown
        #: rel -> (bytes on disk or None, new bytes)
        self.changes: dict[str, tuple[bytes | None, bytes]] = {}
        #: rel -> bytes on disk: ours, no longer emitted
        self.removals: dict[str, bytes] = {}
        self.foreign: list[str] = []
        self.problems: list[str] = []

    def at(self, rel: str) -> str:
        return f"{self.shown.rstrip('/')}/{rel}"


def _writable(rel: str) -> bool:
    """Whether ``rel`` is a name we write below DIR: relative, plain, no ``..``, nothing hidden."""
    path = PurePosixPath(rel)
    return (
        bool(rel)
        and not path.is_absolute()
        and str(path) == rel
        and "\0" not in rel
        and not any(part.startswith(".") for part in path.parts)
    )


def _entries_of_manifest(text: bytes, plan: _Plan) -> set[str]:
    owned = set()
    for raw in text.decode("utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not _writable(line):
            # We never write such an entry: someone edited the manifest.
            plan.problems.append(
                f"{plan.at(MANIFEST)}: {line!r} is not a file elastic-compile writes; fix or delete it"
            )
            continue
        owned.add(line)
    return owned


class _Tree:
    """The directories below DIR that hold our files, opened once each, never through a link."""

    def __init__(self, stack: ExitStack, dir_fd: int, shown: str, created: list[tuple[int, str]] | None = None):
        """``created``: when given, missing directories are made and recorded there (for a rollback)."""
        self.stack, self.dir_fd, self.shown, self.created = stack, dir_fd, shown.rstrip("/"), created
        self.opened: dict[str, int | None] = {".": dir_fd}

    def fd(self, directory: str) -> int | None:
        """The open directory ``directory`` (relative to DIR; None when absent and not created)."""
        if directory not in self.opened:
            path = PurePosixPath(directory)
            above = self.fd(str(path.parent))
            fd = None
            if above is not None:
                absent = self.created is not None and safefs.kind(above, path.name) == "absent"
                shown = f"{self.shown}/{directory}"
                fd = safefs.subdirectory(above, path.name, shown, create=self.created is not None)
                if fd is not None:
                    self.stack.callback(os.close, fd)
                    if absent and self.created is not None:
                        self.created.append((above, path.name))
            self.opened[directory] = fd
        return self.opened[directory]

    def parent(self, rel: str) -> int | None:
        """The open directory holding the file ``rel``."""
        return self.fd(str(PurePosixPath(rel).parent))


def _survey(dir_fd: int | None, plan: _Plan, files: dict[str, bytes]) -> None:
    """Fill ``plan``: what each file would replace, what goes away, what is refused."""
    if dir_fd is None:
        plan.changes = {rel: (None, data) for rel, data in files.items()}
        return
    if safefs.kind(dir_fd, ".git") != "absent":
        plan.problems.append(f"{plan.shown}: holds .git; elastic-compile writes only into a directory of its own")
        return
    with ExitStack() as stack:
        tree = _Tree(stack, dir_fd, plan.shown)
        try:
            manifest = safefs.read_regular(dir_fd, MANIFEST, plan.at(MANIFEST))
        except safefs.Refused as e:
            plan.problems.append(str(e))
            return
        owned = _entries_of_manifest(manifest, plan) if manifest is not None else set()
        for rel in sorted(files):
            try:
                parent = tree.parent(rel)
                name = PurePosixPath(rel).name
                old = None if parent is None else safefs.read_regular(parent, name, plan.at(rel))
            except safefs.Refused as e:
                plan.problems.append(str(e))
                continue
            if old is not None and rel not in owned and rel != MANIFEST and old != files[rel]:
                plan.problems.append(
                    f"{plan.at(rel)}: exists and was not written by elastic-compile (not in {MANIFEST}); "
                    "move it away or choose another -o"
                )
                continue
            plan.changes[rel] = (old, files[rel])
        for rel in sorted(owned - set(files)):
            try:
                parent = tree.parent(rel)
                old = None if parent is None else safefs.read_regular(parent, PurePosixPath(rel).name, plan.at(rel))
            except safefs.Refused:
                continue  # no longer the file we wrote (a link or a directory now): not ours to remove
            if old is not None:
                plan.removals[rel] = old
        ours = {PurePosixPath(rel).parts[0] for rel in (*files, *owned)}
        plan.foreign = [name for name in safefs.entries(dir_fd, _MAX_ENTRIES) if name not in ours]


def _in_git(path: Path) -> bool:
    """Whether ``path`` goes through a directory named ``.git`` (in any case: macOS folds it)."""
    return any(part.lower() == ".git" for part in path.parts)


def _plan(target: Path, files: dict[str, str], boundary: safefs.Boundary, specs: Sequence[str]) -> _Plan:
    shown = str(target)
    plan = _Plan(shown)
    # Names come from the spec's namespace and name (DNS labels), or from a stored result:
    # checked here, where a wrong one would write outside DIR.
    plan.problems += [
        f"{plan.at(rel)}: not a name elastic-compile writes; not written" for rel in files if not _writable(rel)
    ]
    if plan.problems:
        return plan
    data = {rel: text.encode("utf-8") for rel, text in files.items()}
    data[MANIFEST] = manifest_text(list(files)).encode("utf-8")
    real = Path(os.path.realpath(target))
    tree = safefs.work_tree()
    if safefs.inside(tree, real):
        plan.problems.append(
            f"{shown}: is the working tree {safefs.display(tree)} or contains it; "
            "elastic-compile writes only into a directory of its own"
        )
    chosen = reach(target, boundary) is not boundary  # outside as written: all of its real path counts
    if (
        _in_git(target)
        or (safefs.inside(real, boundary.root) and _in_git(real.relative_to(boundary.root)))
        or (chosen and _in_git(real))
    ):
        # As written and where its links lead: hooks and config there run as the user's git.
        plan.problems.append(f"{shown}: is .git or inside it; elastic-compile writes only into a directory of its own")
    for spec in specs:
        if spec != "-" and safefs.inside(Path(os.path.realpath(spec)), real):
            plan.problems.append(f"{shown}: contains the spec {spec}; write the base to a directory of its own")
    if plan.problems:
        return plan
    try:
        with reach(target, boundary).directory(target, shown) as dir_fd:
            _survey(dir_fd, plan, data)
    except safefs.Refused as e:
        plan.problems.append(str(e))
    except OSError as e:
        plan.problems.append(f"{shown}: cannot read: {e.strerror or e}")
    plan.problems = list(dict.fromkeys(plan.problems))  # a refused directory is named once, not per file
    return plan


# --------------------------------------------------------------------------- writing


def _temp_name(name: str, tag: str) -> str:
    # Transient names only: they never outlive a run (a crash aside, and then they say whose they are).
    return f".{name}.elastic-compile-{tag}-{os.urandom(4).hex()}"


def _write_new(parent: int, name: str, data: bytes) -> str:
    """``data`` in a fresh temporary file beside ``name`` (mode 0666 minus the umask); its name.

    Not yet on disk: :func:`_sync` makes the staged files durable before any is renamed.
    """
    temp = _temp_name(name, "new")
    safefs.create(parent, temp, data, 0o666)
    return temp


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# fsyncs at once: a journaling filesystem (ext4's jbd2, XFS) commits concurrent fsyncs
# together, where one after another each waits for a commit of its own (600 small files:
# 2.9 s one by one, 0.08 s 32 at a time, on this project's machine).
_SYNC_THREADS = 32


def _sync_one(parent: int, temp: str) -> None:
    fd = os.open(temp, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=parent)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync(staged: Sequence[tuple[int, str]]) -> None:
    """fsync every staged file, side by side; ``_SyncFailed`` names the first that failed."""
    from concurrent.futures import ThreadPoolExecutor  # -o only: printing to stdout never needs threads

    with ThreadPoolExecutor(max_workers=max(1, min(_SYNC_THREADS, len(staged)))) as pool:
        futures = [pool.submit(_sync_one, parent, temp) for parent, temp in staged]
    for index, future in enumerate(futures):
        error = future.exception()
        if error is not None:
            raise _SyncFailed(index) from error


class _SyncFailed(Exception):
    """The ``index``-th staged file could not be made durable (the cause is chained)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class _Transaction:
    """Renames with a journal, so that a failure puts every old file back."""

    def __init__(self) -> None:
        self.staged: list[tuple[int, str]] = []  # temporary files not yet renamed
        self.undo: list[tuple[str, int, str, str | None]] = []  # (what, dir, name, backup)
        self.created_dirs: list[tuple[int, str]] = []
        self.backups: list[tuple[int, str]] = []

    def keep_old(self, parent: int, name: str) -> str:
        """A hard link to the current ``name``, so it can be put back."""
        backup = _temp_name(name, "old")
        os.link(name, backup, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
        self.backups.append((parent, backup))
        return backup

    def replace(self, parent: int, temp: str, name: str, old: bytes | None, shown: str) -> None:
        """Rename ``temp`` over ``name``, which must still hold ``old`` (None: must still be absent)."""
        if old is None:
            # link() never replaces: a file that appeared since the survey is kept, and we stop.
            try:
                os.link(temp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
            except FileExistsError as e:
                raise WriteError(f"{shown}: appeared while elastic-compile was writing; left alone") from e
            os.unlink(temp, dir_fd=parent)
            self.staged.remove((parent, temp))
            self.undo.append(("put", parent, name, None))
            return
        if safefs.read_regular(parent, name, shown) != old:
            raise WriteError(f"{shown}: changed while elastic-compile was writing; left alone")
        backup = self.keep_old(parent, name)
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        self.staged.remove((parent, temp))
        self.undo.append(("put", parent, name, backup))

    def remove(self, parent: int, name: str) -> None:
        backup = self.keep_old(parent, name)
        os.unlink(name, dir_fd=parent)
        self.undo.append(("removed", parent, name, backup))

    def rollback(self) -> list[str]:
        """Undo everything, newest first; what could not be undone, in words."""
        failed = []
        for what, parent, name, backup in reversed(self.undo):
            try:
                if backup is not None:
                    os.rename(backup, name, src_dir_fd=parent, dst_dir_fd=parent)
                    self.backups.remove((parent, backup))
                elif what == "put":
                    os.unlink(name, dir_fd=parent)
            except OSError as e:
                failed.append(f"{name}: {e.strerror or e}")
        for parent, temp in self.staged:
            _quietly_unlink(parent, temp)
        for parent, name in reversed(self.created_dirs):
            try:
                os.rmdir(name, dir_fd=parent)
            except OSError as e:
                failed.append(f"{name}/: {e.strerror or e}")
        self.finish()
        return failed

    def finish(self) -> None:
        for parent, backup in self.backups:
            _quietly_unlink(parent, backup)
        self.backups.clear()


def _quietly_unlink(parent: int, name: str) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=parent)


def _must(fd: int | None) -> int:
    if fd is None:  # a _Tree that creates directories always returns one
        raise OSError("directory vanished")
    return fd


def _apply(dir_fd: int, plan: _Plan) -> None:
    """Carry out ``plan`` in the open DIR; on any failure put everything back and raise WriteError."""
    tx = _Transaction()
    current = plan.shown
    with ExitStack() as stack:
        tree = _Tree(stack, dir_fd, plan.shown, tx.created_dirs)
        try:
            targets = []
            # The manifest last: until it is in place, the old one still describes DIR.
            for rel in sorted(plan.changes, key=lambda r: (r == MANIFEST, r)):
                old, new = plan.changes[rel]
                if old == new:
                    continue
                current = plan.at(rel)
                parent = _must(tree.parent(rel))
                tx.staged.append((parent, _write_new(parent, PurePosixPath(rel).name, new)))
                targets.append((parent, tx.staged[-1][1], PurePosixPath(rel).name, old, plan.at(rel)))
            try:
                _sync(list(tx.staged))
            except _SyncFailed as unsynced:
                current = targets[unsynced.index][4]
                raise unsynced.__cause__ or unsynced from None
            for parent, temp, name, old, shown in targets:
                current = shown
                tx.replace(parent, temp, name, old, shown)
            emptied = set()
            for rel in sorted(plan.removals):
                current = plan.at(rel)
                tx.remove(_must(tree.parent(rel)), PurePosixPath(rel).name)
                emptied.add(str(PurePosixPath(rel).parent))
        except BaseException as e:
            failed = tx.rollback()
            lines = [str(e)] if isinstance(e, (WriteError, safefs.Refused)) else []
            if isinstance(e, OSError):
                lines = [f"cannot write {current}: {e.strerror or e}"]
            lines += [f"could not put back {what} in {plan.shown}" for what in failed]
            if lines:
                raise WriteError(lines) from e
            raise
        tx.finish()
        # Directories that held only our removed files go too; any other content keeps them.
        for rel in sorted(emptied, key=lambda r: -len(PurePosixPath(r).parts)):
            path = PurePosixPath(rel)
            while str(path) != ".":
                try:
                    os.rmdir(path.name, dir_fd=_must(tree.fd(str(path.parent))))
                except OSError:
                    break
                path = path.parent


class Counts(NamedTuple):
    """What a write did, or a check found, to the files of ``-o DIR`` (its manifest not counted)."""

    #: Files written (a write), or that a write would change (a check).
    changed: int
    #: Files that already held what would be written.
    unchanged: int
    #: Files of ours that are no longer emitted: removed (a write), or that a write would remove.
    removed: int


def _counts(plan: _Plan) -> Counts:
    changes = [(old, new) for rel, (old, new) in plan.changes.items() if rel != MANIFEST]
    unchanged = sum(1 for old, new in changes if old == new)
    return Counts(len(changes) - unchanged, unchanged, len(plan.removals))


def write_directory(
    target: Path, files: dict[str, str], *, boundary: safefs.Boundary, specs: Sequence[str] = ()
) -> Counts:
    """Write ``files`` into ``target`` as its owner: all or nothing; raises :class:`WriteError`.

    ``specs`` are the spec paths being compiled (a DIR that holds one is refused). Returns
    what was written, left as it was and removed.
    """
    plan = _plan(target, files, boundary, specs)
    if plan.problems:
        raise WriteError(plan.problems)
    try:
        with reach(target, boundary).directory(target, str(target), create=True) as dir_fd:
            _apply(_must(dir_fd), plan)
    except safefs.Refused as e:
        raise WriteError(str(e)) from e
    except OSError as e:
        raise WriteError(f"cannot write {target}: {e.strerror or e}") from e
    return _counts(plan)


# --------------------------------------------------------------------------- --check


def _lines(text: str) -> list[str]:
    # difflib glues a last line without a newline onto the next diff line; mark it the
    # way diff and git do so the diff stays readable (and applicable).
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


class Stale(NamedTuple):
    """One file ``--check`` found stale."""

    #: The file as shown in the diff (``DIR/rel``, or ``--check FILE``).
    path: str
    #: The first line of the file on disk that a write would change (1 for a file created or removed).
    line: int
    #: ``changed``, ``created`` or ``removed``.
    what: str


class Drift(NamedTuple):
    """What ``--check`` found: the unified diff and each stale file (both empty when current)."""

    diff: str
    stale: list[Stale]
    #: Entries of DIR that are not ours: named, never read.
    foreign: Sequence[str] = ()
    counts: Counts = Counts(0, 0, 0)


def _stale(old: str | None, new: str | None, name: str) -> Stale:
    if old is None or new is None:
        return Stale(name, 1, "created" if old is None else "removed")
    old_lines, new_lines = old.splitlines(), new.splitlines()
    first = next((i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=False)) if a != b), None)
    if first is None:  # one is the other plus lines at the end
        first = min(len(old_lines), len(new_lines))
    return Stale(name, min(first + 1, max(len(old_lines), 1)), "changed")


def _unified(old: str | None, new: str | None, name: str) -> str:
    """A unified diff; ``None`` on one side means the file is created or removed."""
    import difflib  # --check only

    diff = "".join(
        difflib.unified_diff(
            _lines(old or ""),
            _lines(new or ""),
            "/dev/null" if old is None else f"a/{name}",
            "/dev/null" if new is None else f"b/{name}",
        )
    )
    if not diff and (old is None) != (new is None):
        # An empty file that appears or vanishes has no lines to show.
        diff = f"{'new' if old is None else 'deleted'} empty file {name}\n"
    return diff


def _text(data: bytes | None) -> str | None:
    # A stray binary file must show up as drift, not crash the check; universal newlines
    # as before, so a checkout with CRLF line ends is not drift.
    if data is None:
        return None
    if len(data) > safefs.MAX_READ:
        return f"(more than {safefs.MAX_READ} bytes: not shown)\n"
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def diff_file(path: Path, text: str, *, boundary: safefs.Boundary) -> Drift:
    """Unified diff from the file ``path`` on disk to ``text`` (empty when identical)."""
    shown = str(path)
    if not path.name:
        # "." (or "/"): a directory with no name within its parent, which the read below would
        # take for a file that does not exist, and so for one a write would create.
        raise WriteError(f"{shown}: a directory, not a file elastic-compile wrote")
    try:
        with reach(path.parent, boundary).directory(path.parent, str(path.parent) or ".") as parent:
            old = None if parent is None else safefs.read_regular(parent, path.name, shown)
    except safefs.Refused as e:
        raise WriteError(str(e)) from e
    old_text = _text(old)
    diff = _unified(old_text, text, shown)
    return Drift(diff, [_stale(old_text, text, shown)] if diff else [])


def diff_directory(
    target: Path, files: dict[str, str], *, boundary: safefs.Boundary, specs: Sequence[str] = ()
) -> Drift:
    """The diff a write would make in ``target`` (ours only), each stale file, the names it would leave alone,
    and its counts.

    Raises :class:`WriteError` for what a write would refuse. Files that are not ours are
    never read into the diff: they are named, not shown.
    """
    plan = _plan(target, files, boundary, specs)
    if plan.problems:
        raise WriteError(plan.problems)
    out = []
    stale = []
    for rel in sorted({*plan.changes, *plan.removals}):
        old, new = plan.changes.get(rel, (plan.removals.get(rel), None))
        old_text, new_text = _text(old), _text(new)
        if old_text != new_text:
            out.append(_unified(old_text, new_text, plan.at(rel)))
            stale.append(_stale(old_text, new_text, plan.at(rel)))
    return Drift("".join(out), stale, [plan.at(name) for name in plan.foreign], _counts(plan))


def reach(path: Path, boundary: safefs.Boundary) -> safefs.Boundary:
    """The boundary to walk to ``path``, a directory named on the command line.

    Inside ``boundary`` as written: ``boundary`` itself, so that a committed link on the way
    that leads out is refused. Outside it as written (``-o ../elsewhere``, ``-o /tmp/out``):
    the user typed that path, not a pull request, so it is reached as written, from its
    nearest existing ancestor (links there are the user's own); what a write refuses inside
    DIR (links, ``.git``, foreign files) it still refuses.
    """
    absolute = Path(os.path.abspath(path))
    if safefs.inside(absolute, boundary.root):
        return boundary
    start = absolute
    while not start.is_dir() and start != start.parent:
        start = start.parent
    return safefs.Boundary(start)


def default_boundary(root: Path | None) -> safefs.Boundary:
    """The boundary for ``-o`` and ``--check``: ``root`` when given, else the working tree."""
    return safefs.Boundary(root if root is not None else safefs.work_tree())


__all__ = [
    "MANIFEST",
    "Counts",
    "Drift",
    "Stale",
    "WriteError",
    "default_boundary",
    "diff_directory",
    "diff_file",
    "manifest_text",
    "reach",
    "write_directory",
]
