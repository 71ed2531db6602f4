"""SVG from DOT text: which program draws it, and running that program.

graphviz-pure, a Rust port of Graphviz's `dot` that fsm-agent depends on (wheels for Linux
x86_64 and aarch64, macOS and Windows), draws the SVG by default: nothing beyond
`pip install` is needed, and it measures text with its own bundled fonts, so the same DOT
gives the same bytes on every machine. Graphviz's own `dot` on PATH is used only where
graphviz-pure is not installed (a platform it has no wheel for); its SVG depends on the
Graphviz version and the system's fonts. Either way one machine gives the same bytes for
the same DOT, and both draw with the same few SVG elements (see `report_html.safe_svg`).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

import attrs

from fsm_agent.errors import FsmAgentError

#: A layout of a few dozen states takes milliseconds; this only bounds a renderer gone wrong.
RENDER_TIMEOUT_S = 60.0
_PURE = "graphviz-pure"


@attrs.frozen
class Renderer:
    """A program that turns DOT into SVG with `dot`'s command line (`-Tsvg`, DOT on stdin)."""

    name: str  # "graphviz-pure" or "dot"
    path: str


def _graphviz_pure() -> str | None:
    """The graphviz-pure program installed with this Python's packages.

    Found through the package's own file list, so it is found in a virtual environment that
    is not activated (its bin/ not on PATH) and wherever pip put the script (--user, a
    prefix); PATH is the last resort.
    """
    try:
        dist = importlib.metadata.distribution(_PURE)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.stem == _PURE and file.parent.name in ("bin", "Scripts"):
            found = Path(str(dist.locate_file(file))).resolve()
            if found.is_file() and os.access(found, os.X_OK):
                return str(found)
    return shutil.which(_PURE)


def find_renderer() -> Renderer | None:
    """graphviz-pure if it is installed, else Graphviz's `dot` on PATH, else None."""
    if (pure := _graphviz_pure()) is not None:
        return Renderer(_PURE, pure)
    if (dot := shutil.which("dot")) is not None:
        return Renderer("dot", dot)
    return None


def render_svg(renderer: Renderer, dot_text: str) -> str:
    """`dot_text` laid out and drawn as SVG by `renderer`."""
    try:
        done = subprocess.run(  # noqa: S603 - a located program, our own DOT text on stdin
            [renderer.path, "-Tsvg"],
            input=dot_text,
            capture_output=True,
            encoding="utf-8",
            timeout=RENDER_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FsmAgentError(f"{renderer.name} ({renderer.path}) could not run: {exc}") from exc
    if done.returncode != 0:
        raise FsmAgentError(f"{renderer.name} could not render the diagram: {done.stderr.strip()}")
    return done.stdout
