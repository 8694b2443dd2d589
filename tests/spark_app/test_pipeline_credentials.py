"""Pipelines take the user's keys from a file, never from the command line (issue 16)."""

from __future__ import annotations

import argparse

import pytest

from spark_app.pipeline_cli import UsageError, add_source_arguments, source_options


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_source_arguments(parser, streaming=True)
    return parser.parse_args(["--brokers", "h:1", "--topics", "t", *argv])


def test_credentials_file_becomes_the_connector_option() -> None:
    options = source_options(_parse("--credentials-file", "/run/keys"))
    assert options["credentialsFile"] == "/run/keys"
    assert "credentialsFile" not in source_options(_parse())


@pytest.mark.parametrize("key", ["secretKey", "SECRETKEY", "tierS3SecretAccessKey"])
def test_a_secret_on_the_command_line_is_refused(key: str) -> None:
    with pytest.raises(UsageError, match="--credentials-file"):
        source_options(_parse("--option", f"{key}=hunter2-secret"))
