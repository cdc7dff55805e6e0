"""A Confluent-compatible schema registry: registering the topic's schema, reading schemas by id.

Through confluent-kafka's ``SchemaRegistryClient`` (its settings: ``basic.auth.user.info``,
``bearer.auth.*``, ``ssl.*``, ``timeout``), with the subject ``<topic>-value`` (Confluent's
TopicNameStrategy).

Guarantees: every error is a `CdcError` that names the registry's
URL without credentials, the subject or schema id, and the registry's own reason; no setting's
value (a password, a token) appears in any message. A refused schema is a
`SchemaError`; unreachable registry, refused credentials and unknown
settings are `ConfigError`. Schemas by id are cached per client.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from cdc_emitter.errors import ConfigError, SchemaError


def subject_for(topic: str) -> str:
    """The subject of a topic's message values under TopicNameStrategy."""
    return f"{topic}-value"


def safe_url(url: str) -> str:
    """``url`` without the user and password it may carry."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class SchemaRegistry:
    """One registry (URL + client settings), cached schemas by id."""

    def __init__(self, url: str, config: Mapping[str, Any] | None = None):
        if not url or not isinstance(url, str):
            raise ConfigError(f"a schema registry URL is required, got {url!r}")
        self.url = url
        self.where = f"schema registry {safe_url(url)}"
        self.config = {str(k): v for k, v in (config or {}).items()}
        self._client: Any = None
        self._texts: dict[int, str] = {}
        self._data_schemas: dict[int, dict] = {}

    def __repr__(self) -> str:  # never the settings: they hold secrets
        return f"SchemaRegistry({safe_url(self.url)!r})"

    def spec(self) -> dict:
        """What another process needs to open the same registry (URL and settings)."""
        return {"url": self.url, "config": dict(self.config)}

    # -- the client ---------------------------------------------------------------------------

    def client(self) -> Any:
        if self._client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:  # the extra is a dependency; say so if it is missing
                raise ConfigError(
                    f"{self.where}: confluent-kafka's schema registry client cannot be imported "
                    f"({exc}): pip install 'confluent-kafka[schemaregistry]'"
                ) from None
            conf = {"url": self.url, **self.config}
            try:
                self._client = SchemaRegistryClient(conf)
            except (ValueError, TypeError) as exc:  # unknown or bad settings: keys only
                keys = ", ".join(sorted(self.config)) or "none"
                raise ConfigError(
                    f"{self.where}: the client settings are not accepted ({_no_secrets(exc, self.config)}); "
                    f"settings given: {keys}"
                ) from None
        return self._client

    def _call(self, what: str, fn, *args, missing: str | None = None) -> Any:
        """``fn(*args)``, its failures as CdcErrors; ``missing``: the text for an HTTP 404."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return fn(*args)
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            reason = _no_secrets(exc.error_message or exc, self.config)
            if status in (401, 403):
                raise ConfigError(
                    f"{self.where} refused the credentials while {what} (HTTP {status}: {reason}): "
                    "check basic.auth.user.info or bearer.auth.token in the registry settings"
                ) from None
            if status == 409:
                raise SchemaError(
                    f"{self.where} refused the schema while {what} (HTTP 409): {reason}"
                ) from None
            if status == 404:
                raise SchemaError(f"{self.where} {missing or 'has no answer'} (HTTP 404)") from None
            raise ConfigError(
                f"{self.where} failed while {what} (HTTP {status}): {reason}"
            ) from None
        except Exception as exc:  # transport errors: OSError, httpx's own
            if isinstance(exc, (OSError, ValueError)) or type(exc).__module__.startswith(
                ("httpx", "httpcore")
            ):
                raise ConfigError(
                    f"cannot reach the schema registry at {safe_url(self.url)}: "
                    f"{_no_secrets(exc, self.config) or type(exc).__name__} (while {what})"
                ) from None
            raise

    # -- what the sink and the readers ask ------------------------------------------------------

    def register(self, subject: str, schema_text: str) -> int:
        """The id of ``schema_text`` under ``subject``: registered if new, under the subject's
        compatibility rule (a refusal raises `SchemaError` with the registry's reason)."""
        from confluent_kafka.schema_registry import Schema

        client = self.client()
        return int(
            self._call(
                f"registering the schema of subject {subject!r}",
                client.register_schema,
                subject,
                Schema(schema_text, "AVRO"),
            )
        )

    def compatibility(self, subject: str) -> str:
        """The compatibility level that applies to ``subject``: its own, else the registry's."""
        client = self.client()
        try:
            return str(
                self._call(
                    f"reading the compatibility of subject {subject!r}",
                    client.get_compatibility,
                    subject,
                    missing=f"has no compatibility level for subject {subject!r}",
                )
            )
        except SchemaError:  # no level of its own (HTTP 404): the registry's default applies
            return str(self._call("reading the default compatibility", client.get_compatibility))

    def schema_text(self, schema_id: int) -> str:
        """The schema registered under ``schema_id`` (cached)."""
        text = self._texts.get(schema_id)
        if text is None:
            schema = self._call(
                f"reading schema id {schema_id}",
                self.client().get_schema,
                schema_id,
                missing=f"has no schema id {schema_id}",
            )
            text = self._texts[schema_id] = schema.schema_str
        return text

    def data_schema(self, schema_id: int) -> dict:
        """The CDC data record schema of the union registered under ``schema_id`` (cached)."""
        found = self._data_schemas.get(schema_id)
        if found is None:
            from cdc_emitter.protocol.schemas import data_schema_from_text

            text = self.schema_text(schema_id)
            try:
                found = data_schema_from_text(text)
            except SchemaError as exc:
                raise SchemaError(f"{self.where}: schema id {schema_id}: {exc}") from None
            self._data_schemas[schema_id] = found
        return found


#: setting names whose values are secrets (basic.auth.user.info, bearer.auth.token, ...)
SECRET_WORDS = ("user.info", "token", "password", "secret")


def _no_secrets(exc: Any, config: Mapping[str, Any]) -> str:
    """The text of ``exc`` with every setting's value blanked (a password echoed back, say)."""
    text = str(exc)
    for key, value in config.items():
        if not any(word in key for word in SECRET_WORDS):
            continue
        for secret in sorted({str(value), *str(value).split(":", 1)[1:]}, key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, "***")
    return text


# Messages read back from each partition's end to find a framed one: a transaction marker (a
# claim's commit, written by the broker a moment after the commit returns) can come last.
TAIL_FOR_SCHEMA_ID = 16


def newest_schema_id(
    bootstrap_servers: str, topic: str, config: Mapping[str, Any] | None = None
) -> int | None:
    """The schema id in the Confluent header of the newest framed message at the end of
    ``topic`` (by timestamp across partitions), or None when the tail holds none."""
    from cdc_emitter.kafka.reading import last_messages

    framed = [
        r
        for r in last_messages(bootstrap_servers, topic, TAIL_FOR_SCHEMA_ID, config=config)
        if r.value is not None and len(r.value) >= 5 and r.value[0] == 0
    ]
    if not framed:
        return None
    newest = max(framed, key=lambda r: (r.timestamp or 0, r.offset))
    return int.from_bytes(newest.value[1:5], "big")  # type: ignore[index]


def fetch_registry_schema(url: str, schema_id: int, config: Mapping[str, Any] | None = None) -> str:
    """The schema text registered under ``schema_id`` in a Confluent schema registry."""
    return SchemaRegistry(url, config).schema_text(schema_id)


def schema_text_of(data_schema: dict) -> str:
    """The text registered for a data schema: its full CDC union, compact.

    Nullable columns (a union whose first branch is null) get ``"default": null``: the bytes
    are the same, and a reader resolving an older message into a schema with a column added
    needs a default for it (Avro's resolution; BACKWARD compatibility in registries).
    """
    from cdc_emitter.protocol.schemas import union_schema

    fields = [
        {**f, "default": None}
        if isinstance(f.get("type"), list) and f["type"][:1] == ["null"] and "default" not in f
        else f
        for f in data_schema["fields"]
    ]
    return json.dumps(union_schema({**data_schema, "fields": fields}), separators=(",", ":"))
