"""convert: options that do not apply to the FORMAT are usage errors (exit 2), before Spark starts."""

from __future__ import annotations

import pytest

COLUMNS = "id long not null, name string, price int"


@pytest.mark.parametrize(
    "args, message",
    [
        (["cockroachdb", "t", "--topic", "o", "--checkpoint", "c"], "cockroachdb needs --columns"),
        (
            ["ydb", "t", "--columns", COLUMNS, "--topic", "o", "--checkpoint", "c"],
            "ydb needs --key",
        ),
        (
            [
                "cockroachdb",
                "t",
                "--columns",
                COLUMNS,
                "--key",
                "id",
                "--topic",
                "o",
                "--checkpoint",
                "c",
            ],
            "--key: not for cockroachdb",
        ),
        (
            ["delta", "/t", "--columns", COLUMNS, "--topic", "o", "--checkpoint", "c"],
            "--columns: not for delta",
        ),
        (
            [
                "ydb",
                "t",
                "--columns",
                COLUMNS,
                "--key",
                "id",
                "--starting-version",
                "3",
                "--topic",
                "o",
                "--checkpoint",
                "c",
            ],
            "--starting-version: not for ydb",
        ),
    ],
)
def test_cli_options_that_do_not_apply_are_usage_errors(args, message):
    from click.testing import CliRunner

    from cdc_emitter.cli import main

    done = CliRunner().invoke(main, ["convert", *args])
    assert done.exit_code == 2
    assert f"Error: {message}" in done.output
