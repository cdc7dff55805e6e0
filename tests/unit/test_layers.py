"""The layers point one way: the pure modules import neither Kafka nor Spark, only kafka_io
talks to Kafka and only registry to a schema registry (through confluent-kafka's client). Checked on the source (every import statement, also those inside functions)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "cdc_emitter"
PURE = ["core.py", "codec.py", "bloom.py", "materialize.py", "decode_pool.py", "_decode_worker.py",
        "sink_metrics.py", "convert_plan.py", "sink_interval.py", "small_batch.py", "sink_digest.py",
        "sink_batch.py"]
NO_SPARK = [*PURE, "kafka_io.py", "verify.py", "registry.py"]


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_neither_kafka_nor_spark(module):
    assert imported(PACKAGE / module) & {"confluent_kafka", "pyspark"} == set()


@pytest.mark.parametrize("module", NO_SPARK)
def test_reading_modules_import_no_spark(module):
    assert "pyspark" not in imported(PACKAGE / module)


def test_only_kafka_io_and_registry_import_confluent_kafka():
    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if "confluent_kafka" in imported(p))
    assert users == ["kafka_io.py", "registry.py"]


def our_modules(path: Path) -> set[str]:
    """The package's own modules that ``path`` imports (relative imports, also inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module.split(".")[0])
            else:  # from . import x, y
                names.update(alias.name for alias in node.names)
    return names


def test_reading_with_spark_needs_nothing_of_the_sink():
    # the Columns both share (canonical forms, hashes) live in spark_columns, not in a sink module
    assert {m for m in our_modules(PACKAGE / "spark_reader.py") if m.startswith("sink")} == set()
    assert our_modules(PACKAGE / "spark_columns.py") <= {"spark_schema", "codec"}
