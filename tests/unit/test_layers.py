"""The layers point one way, checked on the source (every import statement, also inside functions):

    protocol  <-  kafka  <-  spark  <-  sink, read, convert  <-  cli

``protocol`` imports neither Kafka nor Spark; only ``kafka`` imports confluent_kafka; the local
verifier and the pure sink modules import no Spark; reading with Spark needs nothing of the sink.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "cdc_emitter"

#: what each package may import of ours (besides itself, ``errors`` and the package root)
ALLOWED = {
    "protocol": set(),
    "kafka": {"protocol"},
    "spark": {"protocol", "kafka"},
    "sink": {"protocol", "kafka", "spark"},
    "read": {"protocol", "kafka", "spark"},
    "convert": {"protocol", "kafka", "spark", "sink"},
    "cli": {"protocol", "kafka", "spark", "sink", "read", "convert"},
}
#: modules outside ``protocol`` that stay pure all the same (no Kafka, no Spark)
PURE_ELSEWHERE = [
    "sink/interval.py",
    "sink/batch.py",
    "sink/digest.py",
    "sink/small_batch.py",
    "sink/result.py",
    "sink/interrupted.py",
    "convert/plan.py",
]
NO_SPARK = ["read/verify.py", "read/decode_pool.py", "read/decode_worker.py"]


def imports(path: Path) -> list[str]:
    """Every absolute module name ``path`` imports."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, (
                f"{path.relative_to(PACKAGE)}: relative import; use cdc_emitter.*"
            )
            if node.module == "cdc_emitter":
                names.extend(f"cdc_emitter.{alias.name}" for alias in node.names)
            elif node.module:
                names.append(node.module)
    return names


def top(names: list[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def ours(names: list[str]) -> set[str]:
    """Our packages (second part of ``cdc_emitter.x.y``) that ``names`` reach."""
    return {n.split(".")[1] for n in names if n.startswith("cdc_emitter.")}


def modules(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below(package):
    base = {package, "errors", "__version__", "_moved"}
    bad = {
        str(p.relative_to(PACKAGE)): sorted(ours(imports(p)) - base - ALLOWED[package])
        for p in modules(package)
    }
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.parametrize(
    "module", [str(p.relative_to(PACKAGE)) for p in modules("protocol")] + PURE_ELSEWHERE
)
def test_pure_modules_import_neither_kafka_nor_spark(module):
    assert top(imports(PACKAGE / module)) & {"confluent_kafka", "pyspark"} == set()


@pytest.mark.parametrize("module", NO_SPARK)
def test_local_reading_imports_no_spark(module):
    assert "pyspark" not in top(imports(PACKAGE / module))


def test_only_the_kafka_package_imports_confluent_kafka():
    users = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "confluent_kafka" in top(imports(p))
    )
    assert users and all(u.startswith("kafka/") for u in users), users


@pytest.mark.parametrize(
    "module", ["spark_reader.py", "spark_decode.py", "spark_groups.py", "spark_replay.py"]
)
def test_reading_with_spark_needs_nothing_of_the_sink(module):
    assert "sink" not in ours(imports(PACKAGE / "read" / module))


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cdc_emitter"):
                own = path.name == "__init__.py" and node.module == ".".join(
                    ("cdc_emitter", *path.parent.relative_to(PACKAGE).parts)
                )  # a package's own
                found += [
                    f"{path.relative_to(PACKAGE)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and a.name != "__version__" and not own
                ]
    assert found == []


@pytest.mark.parametrize(
    "package", sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
)
def test_each_package_docstring_names_every_module_in_it(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text())) or ""
    missing = [
        p.stem
        for p in (PACKAGE / package).glob("*.py")
        if p.stem not in ("__init__", "__main__")
        and f"`cdc_emitter.{package}.{p.stem}`" not in doc
        and f"`{p.stem}`" not in doc
    ]
    assert missing == [], f"cdc_emitter/{package}/__init__.py does not name {missing}"
