"""MkDocs hook: the benchmark runner's results and the changelog, published into the site.

Files outside ``docs_dir`` are not published by MkDocs, so this hook

- publishes ``benchmarks/results/**`` (charts, JSON, CSV; not its Markdown) under the same path in
  the site, ``benchmarks/results/...``;
- replaces the marker ``<!-- benchmarks:latest -->`` in ``docs/benchmarks.md`` with the table of
  ``benchmarks/results/latest.md``, its relative links (``charts/sink.png``) rewritten to the
  published files, and lists the charts the table does not show; without results, one line says
  how to make them;
- publishes the repository's ``CHANGELOG.md`` as the page ``changelog.md``.

``CDC_BENCH_RESULTS`` points the hook at another results folder (to try it on made-up results).
This folder (``docs/hooks/``) is in ``exclude_docs``, so the hook's code is not published.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

MARKER = "<!-- benchmarks:latest -->"
PAGE = "benchmarks.md"
#: where the results are published inside the site (and their URIs among the docs' files)
PUBLISHED = "benchmarks/results"
#: the kinds of result files published (the table itself is put into the page instead)
SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".json", ".csv"}
NO_RESULTS = (
    "No results yet: run `benchmarks/run.py`, which writes `benchmarks/results/latest.md`, "
    "`latest.json` and `charts/`."
)

_LINK = re.compile(r"(!?\[[^\]]*\]\()(<[^>]+>|[^)\s]+)((?:\s+\"[^\"]*\")?\))")
_HTML = re.compile(r"""((?:src|href)=["'])([^"']+)(["'])""")
_HEADING = re.compile(r"^(#{1,6}) ", re.MULTILINE)


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def _results(config) -> Path:
    return Path(os.environ.get("CDC_BENCH_RESULTS") or _root(config) / "benchmarks" / "results")


def _published(results: Path) -> list[Path]:
    if not results.is_dir():
        return []
    return sorted(p for p in results.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)


def on_files(files, config):
    results = _results(config)
    for path in _published(results):
        uri = f"{PUBLISHED}/{path.relative_to(results).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    changelog = _root(config) / "CHANGELOG.md"
    if changelog.is_file():
        files.append(
            File.generated(config, "changelog.md", content=changelog.read_text(encoding="utf-8"))
        )
    return files


def _relocate(target: str) -> str:
    """A link of ``latest.md`` (relative to the results folder) as seen from ``docs/benchmarks.md``."""
    bare = target[1:-1] if target.startswith("<") else target
    if re.match(r"^[a-z][a-z0-9+.-]*:", bare, re.I) or bare.startswith(("/", "#")):
        return target  # a URL, an absolute path or an anchor: left as it is
    return posixpath.normpath(posixpath.join(PUBLISHED, bare))


def _demote(text: str) -> str:
    """``text`` with its headings moved below the page's "Latest results" (its top ones: ###)."""
    levels = [len(m.group(1)) for m in _HEADING.finditer(text)]
    if not levels:
        return text
    shift = 3 - min(levels)
    return _HEADING.sub(lambda m: "#" * min(6, len(m.group(1)) + shift) + " ", text)


def results_markdown(results: Path) -> str:
    """The page's text for the results in ``results``: the table and the other charts."""
    table_file = results / "latest.md"
    if not table_file.is_file():
        return NO_RESULTS
    table = table_file.read_text(encoding="utf-8")
    published = {f"{PUBLISHED}/{p.relative_to(results).as_posix()}" for p in _published(results)}

    def link(m: re.Match) -> str:
        target = _relocate(m.group(2))
        if target != m.group(2) and target not in published and not m.group(1).startswith("!"):
            # a file of the repository that the site does not publish (benchmarks/README.md):
            # its text stays, without the link
            return m.group(1)[1:-2]
        return m.group(1) + target + m.group(3)

    table = _LINK.sub(link, table)
    table = _HTML.sub(lambda m: m.group(1) + _relocate(m.group(2)) + m.group(3), table)
    table = _demote(table)
    parts = [table.strip()]
    charts = [
        p
        for p in _published(results)
        if p.suffix.lower() in {".png", ".svg", ".jpg", ".jpeg"}
        and f"{PUBLISHED}/{p.relative_to(results).as_posix()}" not in table
    ]
    if charts:
        parts.append("### Charts")
        for chart in charts:
            uri = f"{PUBLISHED}/{chart.relative_to(results).as_posix()}"
            parts.append(f"![{chart.stem}]({uri})")
    data = [p.name for p in (results / "latest.json", results / "latest.csv") if p.is_file()]
    if data:
        links = ", ".join(f"[`{name}`]({PUBLISHED}/{name})" for name in data)
        parts.append(f"The same results as data: {links}.")
    return "\n\n".join(parts) + "\n"


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != PAGE or MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, results_markdown(_results(config)))


def on_serve(server, config, builder):
    results = _results(config)
    if results.is_dir():
        server.watch(str(results))
    changelog = _root(config) / "CHANGELOG.md"
    if changelog.is_file():
        server.watch(str(changelog))
    return server
