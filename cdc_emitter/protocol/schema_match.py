"""Whether a data record schema reads what another was written with: column by column.

A topic written without a schema registry names no writer schema per message, so every reader
decodes every message with the one schema it is given. A schema given by hand therefore reads
the topic only if it lays the bytes out as the writer's does and means the same by them:
the same columns, in the same order, of the same types, nullable alike. What does not change
that is ignored: docs, defaults, aliases, the names and namespaces of records, enums and fixed
types (a named type used twice compares as its definition).

Pure: the standard library only.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["column_differences", "decoding_form", "short_type_text"]

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
#: what of a primitive or fixed type changes the values read (a decimal's scale, a timestamp's
#: unit) although the bytes are the same
_MEANING = ("logicalType", "precision", "scale")
#: a type text longer than this is cut (with "..." at the end)
TYPE_TEXT_LIMIT = 80


def decoding_form(schema: Any, named: dict[str, Any] | None = None) -> Any:
    """``schema`` reduced to what decoding depends on: its layout and its logical types.

    Args:
        schema: An Avro type (a name, a list for a union, or a dict).
        named: The named types defined so far in the same schema (filled in as records, enums
            and fixed types are met); a reference to one compares as its definition.

    Returns:
        A JSON-able value equal for two types exactly when they decode the same bytes to the
        same values: docs, defaults, aliases and the names of named types left out.
    """
    named = {} if named is None else named
    if isinstance(schema, list):
        return [decoding_form(branch, named) for branch in schema]
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        found = named.get(schema, named.get(schema.rsplit(".", 1)[-1]))
        return {"ref": schema.rsplit(".", 1)[-1]} if found is None else found
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if isinstance(kind, (list, dict)):  # {"type": {...}}: the type itself
        return decoding_form(kind, named)
    meaning = {k: schema[k] for k in _MEANING if k in schema}
    if kind in _PRIMITIVES:
        return {"type": kind, **meaning} if meaning else kind
    if kind in ("record", "error"):
        names = _names(schema)
        for name in names:  # a reference inside its own fields (recursion) stays a name
            named.setdefault(name, {"ref": names[-1]})
        form: Any = {
            "type": "record",
            "fields": [
                [f.get("name"), decoding_form(f.get("type"), named)]
                for f in schema.get("fields") or []
            ],
        }
    elif kind == "enum":
        names = _names(schema)
        form = {"type": "enum", "symbols": list(schema.get("symbols") or [])}
    elif kind == "fixed":
        names = _names(schema)
        form = {"type": "fixed", "size": schema.get("size"), **meaning}
    elif kind == "array":
        return {"type": "array", "items": decoding_form(schema.get("items"), named)}
    elif kind == "map":
        return {"type": "map", "values": decoding_form(schema.get("values"), named)}
    else:  # {"type": "SomeName"}: a reference
        return decoding_form(kind, named)
    for name in names:
        named[name] = form
    return form


def _names(schema: dict) -> list[str]:
    """The names a named type is referred to by: its full name and its short name."""
    name = str(schema.get("name") or "")
    namespace = schema.get("namespace")
    full = name if "." in name or not namespace else f"{namespace}.{name}"
    return sorted({full, name.rsplit(".", 1)[-1]}, key=len, reverse=True)


def short_type_text(schema: Any, limit: int = TYPE_TEXT_LIMIT) -> str:
    """An Avro type as compact JSON (``"int"``, ``["null","int"]``), cut to ``limit``
    characters with ``...`` when longer.

    Args:
        schema: The type.
        limit: The longest text returned.

    Returns:
        The text.
    """
    text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def column_differences(
    given: dict,
    writer: dict,
    *,
    given_is: str = "the file",
    writer_is: str = "the topic",
) -> list[str]:
    """How the data record ``given`` fails to read what ``writer`` wrote, column by column.

    Columns are compared by name, position, type and nullability as decoding sees them
    (`decoding_form`); docs, defaults and the names of named types do not count. A schema
    Avro's resolution could read the writer's data into (a subset of the columns, a column
    made nullable) differs all the same: a reader without per-message writer schemas decodes
    every message with the schema it is given.

    Args:
        given: The data record schema to read with (a record schema as a dict).
        writer: The data record schema the data was written with.
        given_is: How the phrases name where ``given`` comes from.
        writer_is: How the phrases name where ``writer`` comes from.

    Returns:
        One phrase per difference, e.g. ``column 'price' is "int" in the file but
        ["null","int"] in the topic``; empty when ``given`` reads the data as written.
    """
    given_fields = _fields(given)
    writer_fields = _fields(writer)
    given_named: dict[str, Any] = {}
    writer_named: dict[str, Any] = {}
    # forms in field order: a named type defined in one column may be referred to in a later one
    given_forms = {n: decoding_form(t, given_named) for n, t in given_fields}
    writer_forms = {n: decoding_form(t, writer_named) for n, t in writer_fields}
    given_types, writer_types = dict(given_fields), dict(writer_fields)
    out = []
    for name, kind in writer_fields:
        if name not in given_types:
            out.append(f"column {name!r} is in {writer_is} but not in {given_is}")
        elif given_forms[name] != writer_forms[name]:
            mine, theirs = short_type_text(given_types[name]), short_type_text(kind)
            if mine == theirs:  # the same text, defined differently elsewhere (a named type)
                mine = short_type_text(given_forms[name])
                theirs = short_type_text(writer_forms[name])
            out.append(f"column {name!r} is {mine} in {given_is} but {theirs} in {writer_is}")
    out.extend(
        f"column {name!r} is in {given_is} but not in {writer_is}"
        for name, _kind in given_fields
        if name not in writer_types
    )
    given_order = [n for n, _t in given_fields if n in writer_types]
    writer_order = [n for n, _t in writer_fields if n in given_types]
    if given_order != writer_order:
        out.append(
            f"the columns are in another order: {', '.join(given_order)} in {given_is} but "
            f"{', '.join(writer_order)} in {writer_is}"
        )
    return out


def _fields(record: dict) -> list[tuple[str, Any]]:
    """``(name, type)`` of a record schema's fields, in order."""
    return [(str(f.get("name")), f.get("type")) for f in record.get("fields") or []]
