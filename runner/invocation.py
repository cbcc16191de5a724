"""The commands parallax tells its user to run next, written so they work as printed.

A hint such as "then `parallax promote RUN_DIR`" is pasted into the same shell, from the same
directory. So the program is named as it was started when `parallax` on PATH is not that
program (`make demo` runs `.venv/bin/parallax`, tests run `python -m runner`), paths are
relative to the working directory when they lie under it, and every word is shell-quoted.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

PROGRAM = "parallax"


def shown_path(path: Path | str) -> str:
    """`path` as the user can type it here: relative under the working directory (symlinks
    left as they are), absolute elsewhere."""
    absolute = Path(os.path.normpath(Path(path).absolute()))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def program() -> list[str]:
    """The words that start this parallax again from here."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in {"runner.__main__", "runner"}:
        return [_runnable(sys.executable), "-m", "runner"]
    started = sys.argv[0] if sys.argv else ""
    if Path(started).name != PROGRAM:  # parallax called from other code: no better guess
        return [PROGRAM]
    found = shutil.which(PROGRAM)
    try:
        if found is not None and Path(found).samefile(started):
            return [PROGRAM]
    except OSError:
        pass
    return [_runnable(started)]


def _runnable(path: str) -> str:
    """A program path a shell runs as a path, never looks up on PATH (`./parallax`)."""
    shown = shown_path(path)
    return shown if os.sep in shown else f".{os.sep}{shown}"


def command(*words: str | Path) -> str:
    """A parallax command line to print: program, then `words` (paths shown from here)."""
    shown = [shown_path(w) if isinstance(w, Path) else w for w in words]
    return shlex.join([*program(), *shown])
