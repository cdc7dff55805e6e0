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


def create_source_sql(
    name: str, bootstrap_servers: str, topic: str, union: list, registry_url: str | None = None
) -> str:
    """The Materialize statement that reads ``topic`` with the CDC ``union`` schema: inline, or
    (``registry_url``) from a Confluent schema registry, where the sink registered it."""
    if registry_url is None:
        schema = json.dumps(union, separators=(",", ":"), ensure_ascii=False)
        form = f"FORMAT AVRO USING SCHEMA {sql_string(schema)}"
    else:
        form = f"FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY {sql_string(registry_url)}"
    return (
        f"CREATE SOURCE {sql_identifier(name)}\n"
        f"FROM KAFKA BROKER {sql_string(bootstrap_servers)} TOPIC {sql_string(topic)}\n"
        f"{form}\n"
        f"ENVELOPE MATERIALIZE;"
    )
