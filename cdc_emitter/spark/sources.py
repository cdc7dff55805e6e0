"""Local inputs checked before Spark starts: missing, empty, or another format than said.

Pure: imports neither PySpark nor confluent_kafka, so the CLI checks a SOURCE in milliseconds,
before the seconds a JVM takes to start, and phrases what Spark's readers would report late or
not at all (a Parquet file read as csv becomes rows of junk).

Guarantees:
  * `check_source` raises only `ConfigError`, with one line naming the path and what to change;
    it never refuses what it cannot see: a path of another file system (``s3a://``, ``hdfs://``,
    ...), a glob, a table or JDBC source, or any path when Spark runs elsewhere (Spark Connect)
    or the default file system is not the local one;
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from cdc_emitter.errors import ConfigError, shorten
from cdc_emitter.spark.data_files import data_files

__all__ = [
    "COMPRESSED_SUFFIXES",
    "FILE_FORMATS",
    "check_source",
    "data_files",
    "local_path",
]

#: The formats whose SOURCE is a path of files (`cdc_emitter.spark.tables.FORMATS` less jdbc and
#: table).
FILE_FORMATS = ("parquet", "csv", "json", "orc", "delta", "avro", "text")
_TEXT_FORMATS = ("csv", "json", "text")
_BINARY_NAMES = {"parquet": "a Parquet file", "orc": "an ORC file", "avro": "an Avro file"}
#: file name endings Hadoop decompresses by (the bytes inside are not text)
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".xz", ".br")
_COMPRESSED_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
}
#: byte order marks of UTF-16 and UTF-32 text, whose characters hold NUL bytes
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
_HEAD = 4096
_GLOB_CHARS = "*?[{"


def local_path(path: str) -> str | None:
    """The local file system path ``path`` names, or None for another file system's URI.

    Args:
        path: A SOURCE as given: a path, a ``file:`` URI, or another scheme's URI.

    Returns:
        ``path`` itself when it has no scheme (a Windows drive letter is no scheme), the path of
        a ``file:`` URI of this host, else None (``s3a://``, ``hdfs://``, ``abfss://``, ...).
    """
    match = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*):", path)
    if match is None or len(match.group(1)) == 1:
        return path
    if match.group(1).lower() != "file":
        return None
    parts = urlsplit(path)
    if parts.netloc not in ("", "localhost"):
        return None
    return unquote(parts.path) or None


def check_source(
    path: str,
    fmt: str,
    *,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
) -> None:
    """Check, before Spark starts, that a local SOURCE exists and holds data of format ``fmt``.

    Sniffs the first bytes of the file (or of a directory's first data file, in name order):
    Parquet starts and ends with ``PAR1``, ORC starts and ends with ``ORC``, an Avro container with
    ``Obj\\x01``; csv, json and text are text (no NUL byte in the first 4 KiB unless compressed),
    and JSON lines start with ``{`` or ``[``. A Delta table is a directory with ``_delta_log/``.

    Args:
        path: SOURCE as given on the command line (a path or a URI).
        fmt: The ``--format`` it is read with. Formats other than `FILE_FORMATS` (jdbc, table)
            are not checked.
        remote: The Spark Connect server (``--remote``) the path is read by, if any: its server
            reads the path on its own machine, so nothing is checked (nor with ``SPARK_REMOTE``).
        conf: The ``--conf`` settings: with ``spark.hadoop.fs.defaultFS`` naming another file
            system, a path without a scheme is that file system's and is not checked.
        options: The reader options (``-O``). An ``encoding`` (or ``charset``) for csv, json
            or text is the text's: a file in UTF-16 or UTF-32 without a byte order mark is then
            text, not binary, and JSON's first character is read in that encoding.

    Raises:
        ConfigError: the local path does not exist; a directory holds no data files; a Delta
            table is not one, or is read as another format; the content is another format than
            ``fmt`` (the message names the ``--format`` to pass).
    """
    if fmt not in FILE_FORMATS or remote or os.environ.get("SPARK_REMOTE"):
        return
    local = local_path(path)
    if local is None:
        return
    if local == path and not _default_fs_is_local(conf):
        return
    if not os.path.exists(local):
        if any(c in local for c in _GLOB_CHARS):
            return  # a Hadoop glob: Spark expands it
        where = "" if os.path.isabs(local) else f" (relative to {shorten(os.getcwd(), 120)})"
        raise ConfigError(
            f"input path {shorten(path, 160)!r} does not exist{where}: check the path; a path "
            "on another file system needs its URI (s3a://..., hdfs://..., abfss://...)"
        )
    text = _TextOptions.of(options)
    if os.path.isdir(local):
        _check_directory(path, local, fmt, text)
    else:
        _check_file(path, local, fmt, text)


class _TextOptions(NamedTuple):
    """What the reader options say about text: its declared encoding, whether a record may
    span lines (``multiLine``), whether a line separator is given (``lineSep``)."""

    encoding: str | None
    multiline: bool
    line_sep: bool

    @classmethod
    def of(cls, options: Mapping[str, str] | None) -> _TextOptions:
        given = {key.lower(): value.strip() for key, value in (options or {}).items()}
        encoding = given.get("encoding") or given.get("charset") or None
        return cls(encoding, given.get("multiline", "").lower() == "true", "linesep" in given)

    @property
    def wide(self) -> bool:
        """The declared encoding has more than one byte per ASCII character (UTF-16, UTF-32)."""
        name = re.sub(r"[^a-z0-9]", "", (self.encoding or "").lower())
        return name.startswith(("utf16", "utf32", "ucs2", "ucs4", "unicode"))


def _check_directory(path: str, local: str, fmt: str, text: _TextOptions) -> None:
    shown = shorten(path, 160)
    is_delta = os.path.isdir(os.path.join(local, "_delta_log"))
    if fmt == "delta":
        if is_delta:
            return
        first = next(_nonempty(data_files(local)), None)
        kind = _sniff_file(first)[0] if first is not None else None
        hint = (
            f": it holds {_BINARY_NAMES[kind].split()[-2]} files, pass --format {kind}"
            if kind in _BINARY_NAMES
            else ": pass the table's root directory (the one holding _delta_log/)"
        )
        raise ConfigError(
            f"input directory {shown!r} is not a Delta table (it has no _delta_log/ directory)"
            + hint
        )
    if is_delta:
        raise ConfigError(
            f"input directory {shown!r} is a Delta table (it has _delta_log/), not plain {fmt} "
            "files: pass --format delta (read as files, Spark would also read the data files "
            "the table has removed)"
        )
    files = data_files(local)
    first = next(files, None)
    if first is None:
        raise ConfigError(
            f"input directory {shown!r} holds no data files (_SUCCESS, .crc and other files "
            "starting with '.' or '_' do not count): check the path"
        )
    sample = next(_nonempty(_chain(first, files)), None)
    if sample is not None:
        rel = os.path.relpath(sample, local)
        shown_file = f"{shorten(os.path.join(path, rel), 160)!r} (in {shown!r})"
        _check_content(shown_file, sample, fmt, text)


def _check_file(path: str, local: str, fmt: str, text: _TextOptions) -> None:
    shown = repr(shorten(path, 160))
    if fmt == "delta":
        kind = _sniff_file(local)[0]
        hint = (
            f"it is {_describe(kind)}, pass --format {kind}"
            if kind in _BINARY_NAMES
            else "pass the table's root directory (the one holding _delta_log/)"
        )
        raise ConfigError(f"input {shown} is a file, not a Delta table (a directory): {hint}")
    _check_content(shown, local, fmt, text)


def _check_content(shown: str, local: str, fmt: str, text: _TextOptions) -> None:
    """Raise when the file ``local`` (named ``shown`` in the message) is not ``fmt``; a text
    format read in a declared encoding is its text whatever its bytes (NULs included)."""
    kind, head = _sniff_file(local)
    if kind == "parquet-truncated" and fmt == "parquet":
        raise ConfigError(
            f"input {shown} is not a complete Parquet file (it starts with PAR1 but does not "
            "end with it): it is truncated or still being written"
        )
    if kind == "parquet-truncated":
        kind = "parquet"
    if kind == fmt:
        return
    if kind in _BINARY_NAMES:
        raise ConfigError(f"input {shown} is {_describe(kind)}, not {fmt}: pass --format {kind}")
    if fmt in _TEXT_FORMATS:
        plain = not local.lower().endswith(COMPRESSED_SUFFIXES)
        if fmt == "csv" and plain:
            _check_csv_encoding(shown, head, text)
        if text.encoding is not None:  # the user says how the text is encoded: trust it
            if fmt == "json" and plain and kind in ("text", "binary"):
                _check_json_start(shown, head, text.encoding)
            return
        if kind == "binary":
            looks = _looks_utf16(head)
            hint = (
                f"it looks like {looks} text without a byte order mark: pass -O encoding={looks}"
                + (" -O multiLine=true" if fmt == "csv" else "")
                if looks
                else "check the path and --format"
            )
            raise ConfigError(
                f"input {shown} is not text (it has NUL bytes in its first 4 KiB and is not "
                f"gzip-compressed), so not {fmt}: {hint}"
            )
        if kind == "text" and fmt == "json" and plain and not head.startswith(_WIDE_BOMS):
            _check_json_start(shown, head)
        return  # text, empty, or compressed (Spark decompresses by the file's suffix)
    # a binary format expected: say what the file holds instead
    if kind == "empty":
        guess = "it is empty (a file still being written?)"
    elif kind == "text":
        guess = (
            "it looks like JSON lines: pass --format json"
            if _first_char(head) in ("{", "[")
            else "it is text: pass --format csv (or json, text)"
        )
    elif kind in _COMPRESSED_MAGIC.values():
        guess = f"it is {kind}-compressed data"
    else:
        guess = f"its first bytes are {head[:8]!r}"
    raise ConfigError(f"input {shown} is not {_describe(fmt)}: {guess}")


def _check_csv_encoding(shown: str, head: bytes, text: _TextOptions) -> None:
    """Spark reads CSV line by line at single ``\\n`` bytes unless ``multiLine`` (or
    ``lineSep``) is set: text of two or four bytes per character is then cut mid-character and
    read as garbage rows, silently. Refuse that, and UTF-16/32 text read as UTF-8."""
    bom = _wide_bom(head)
    if text.encoding is None and bom is not None:
        raise ConfigError(
            f"input {shown} is {bom} text (it starts with a byte order mark); read as UTF-8 every "
            f"row would be garbage: pass -O encoding={bom} -O multiLine=true"
        )
    if text.wide and not (text.multiline or text.line_sep):
        raise ConfigError(
            f"input {shown} is read as {text.encoding} one line at a time, which Spark cuts at "
            "single '\\n' bytes, mid-character: every row would be garbage; add -O multiLine=true"
        )


def _wide_bom(head: bytes) -> str | None:
    """``UTF-16`` or ``UTF-32`` when ``head`` starts with that encoding's byte order mark."""
    if head.startswith((b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00")):
        return "UTF-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    return None


def _looks_utf16(head: bytes) -> str | None:
    """``UTF-16LE`` / ``UTF-16BE`` when ``head`` reads as mostly Latin text in that encoding:
    at least 90 % of every second (first) byte is NUL, and none of the others."""
    if len(head) < 4:
        return None
    for name, high, low in (
        ("UTF-16LE", head[1::2], head[0::2]),
        ("UTF-16BE", head[0::2], head[1::2]),
    ):
        if high.count(0) >= 0.9 * len(high) and low.count(0) == 0:
            return name
    return None


def _check_json_start(shown: str, head: bytes, encoding: str = "utf-8") -> None:
    try:
        text = head.decode(encoding, "replace")
    except LookupError:  # a name Python does not know (Java may): Spark will say
        return
    first = _first_char(text)
    if first and first not in "{[/":  # "/": a comment, read with -O allowComments=true
        line = text.lstrip("\ufeff \t\r\n").splitlines()[0]
        raise ConfigError(
            f"input {shown} is not JSON lines (it starts with {shorten(line, 40)!r}, not '{{' or "
            "'['): pass the --format of its content (csv, text)"
        )


def _describe(kind: str | None) -> str:
    names = {**_BINARY_NAMES, "delta": "a Delta table"}
    return names.get(kind or "", f"a {kind} file")


def _first_char(head: bytes | str) -> str:
    """The first character of ``head`` (UTF-8 bytes, or text) that is not blank (nor a byte
    order mark), or ''."""
    text = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
    return text.lstrip("\ufeff \t\r\n")[:1]


def _sniff_file(path: str) -> tuple[str, bytes]:
    """What ``path`` holds by its first and last bytes (`_sniff`), and its first 4 KiB."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
            size = os.fstat(fh.fileno()).st_size
            tail = b""
            if size >= 8:
                fh.seek(size - 4)
                tail = fh.read(4)
    except OSError as exc:
        raise ConfigError(
            f"cannot read input file {shorten(path, 160)!r}: {exc.strerror or exc}"
        ) from exc
    return _sniff(head, tail, compressed=path.lower().endswith(COMPRESSED_SUFFIXES)), head


def _sniff(head: bytes, tail: bytes, *, compressed: bool = False) -> str:
    """``parquet``, ``parquet-truncated``, ``orc``, ``avro``, a compression (``gzip``, ...),
    ``empty``, ``binary`` (NUL bytes, not compressed) or ``text``."""
    if not head:
        return "empty"
    if head[:4] in (b"PAR1", b"PARE"):
        return "parquet" if tail == head[:4] else "parquet-truncated"
    if head[:3] == b"ORC" and tail[:3] == b"ORC":  # the postscript ends "ORC" + its length
        return "orc"
    if head[:4] == b"Obj\x01":
        return "avro"
    for magic, name in _COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            return name
    if compressed or head.startswith(_WIDE_BOMS):
        return "text"
    return "binary" if b"\x00" in head else "text"


def _spark_defaults() -> dict[str, str]:
    """The settings of ``spark-defaults.conf`` in ``$SPARK_CONF_DIR`` (else
    ``$SPARK_HOME/conf``), as ``spark-submit`` reads them: ``key value`` lines, ``#`` comments."""
    folder = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None
    )
    settings: dict[str, str] = {}
    if folder is None:
        return settings
    try:
        with open(os.path.join(folder, "spark-defaults.conf"), encoding="utf-8") as fh:
            for line in fh:
                parts = line.strip().split(None, 1)
                if len(parts) == 2 and not parts[0].startswith("#"):
                    settings[parts[0]] = parts[1].strip()
    except OSError:  # none there: Spark's built-in defaults
        pass
    return settings


def _default_fs_is_local(conf: Mapping[str, str] | None) -> bool:
    """Whether a path without a scheme is a local one: no ``spark.hadoop.fs.defaultFS`` of
    another file system in ``conf`` or in Spark's ``spark-defaults.conf``, nor
    ``fs.defaultFS`` in ``$HADOOP_CONF_DIR/core-site.xml``."""
    default = (conf or {}).get("spark.hadoop.fs.defaultFS")
    if default is None:
        default = _spark_defaults().get("spark.hadoop.fs.defaultFS")
    if default is None:
        for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
            site = os.path.join(os.environ.get(var, ""), "core-site.xml")
            if os.environ.get(var) and os.path.isfile(site):
                default = _core_site_default_fs(site)
                if default is not None:
                    break
    return default is None or default.strip().lower().startswith("file:")


def _core_site_default_fs(site: str) -> str | None:
    try:
        root = ET.parse(site).getroot()
    except (OSError, ET.ParseError):
        return None
    for prop in root.iter("property"):
        if (prop.findtext("name") or "").strip() in ("fs.defaultFS", "fs.default.name"):
            return prop.findtext("value")
    return None


def _nonempty(files: Iterator[str]) -> Iterator[str]:
    for path in files:
        try:
            if os.path.getsize(path) > 0:
                yield path
        except OSError:
            continue


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest
