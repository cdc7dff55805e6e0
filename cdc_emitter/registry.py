"""Reading a writer schema from a Confluent-compatible schema registry, by id.

Guarantees: an unreachable registry raises :class:`~cdc_emitter.errors.ConfigError` naming the
URL; an unknown id or an answer without a schema raises :class:`~cdc_emitter.errors.SchemaError`
naming the URL and the id.
"""

from __future__ import annotations

import json

from .errors import ConfigError, SchemaError


def fetch_registry_schema(url: str, schema_id: int, timeout: float = 10.0) -> str:
    """The schema text registered under ``schema_id`` in a Confluent schema registry."""
    import urllib.error
    import urllib.request

    endpoint = f"{url.rstrip('/')}/schemas/ids/{schema_id}"
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as resp:
            body = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise SchemaError(f"schema registry {url} has no schema id {schema_id} (HTTP {exc.code})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(f"cannot reach the schema registry at {url}: {reason}") from None
    except ValueError as exc:
        raise SchemaError(f"schema registry {url}: schema id {schema_id}: not JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise SchemaError(f"schema registry {url}: schema id {schema_id}: no 'schema' in the answer")
    return body["schema"]
