"""The Materialize SQL text that reads a CDCv2 topic (``CREATE SOURCE ... ENVELOPE MATERIALIZE``).

Pure: string building only. Identifiers are quoted when they are not plain lower-case names and
string literals double their quotes, so any topic name or schema text yields a valid statement.
"""

from __future__ import annotations

import json
import re


def source_name(topic: str) -> str:
    """A source name derived from ``topic`` (characters outside ``[A-Za-z0-9_]`` become ``_``)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", topic)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


def sql_identifier(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_source_sql(name: str, bootstrap_servers: str, topic: str, union: list) -> str:
    """The Materialize statement that reads ``topic`` with the CDC ``union`` schema."""
    schema = json.dumps(union, separators=(",", ":"), ensure_ascii=False)
    return (
        f"CREATE SOURCE {sql_identifier(name)}\n"
        f"FROM KAFKA BROKER {sql_string(bootstrap_servers)} TOPIC {sql_string(topic)}\n"
        f"FORMAT AVRO USING SCHEMA {sql_string(schema)}\n"
        f"ENVELOPE MATERIALIZE;"
    )
