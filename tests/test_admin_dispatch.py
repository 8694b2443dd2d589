"""`rocketha-admin` sends --broker commands to the broker tool and --controller commands to the
controller tool (or, for data commands, to the broker tool through the controllers), and refuses a
command line that names neither or both (exit 2, nothing sent)."""

from __future__ import annotations

import pytest

import rocketha_admin


@pytest.mark.parametrize("argv", [
    ["topic", "list"],  # neither
    ["--broker", "127.0.0.1:1", "--controller", "127.0.0.1:2", "cluster"],  # both
    ["--broker=127.0.0.1:1", "--controller=127.0.0.1:2", "cluster"],
])
def test_misuse_exits_2_naming_the_options(argv: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert rocketha_admin.main(argv) == 2
    assert "--broker" in capsys.readouterr().err


def test_each_option_reaches_its_tool(capsys: pytest.CaptureFixture[str]) -> None:
    # an unused local port: one line before any command runs, for either tool
    assert rocketha_admin.main(["--controller", "127.0.0.1:9", "--timeout-s", "0.5",
                                "cluster"]) == 2
    assert capsys.readouterr().err.strip() == (
        "rocketha-admin: cannot connect to controller 127.0.0.1:9: connection refused")
    assert rocketha_admin.main(["--broker", "127.0.0.1:9", "topic", "list"]) == 2
    assert "cannot connect to broker 127.0.0.1:9" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # the broker tool's own parser: bad subcommand
        rocketha_admin.main(["--broker", "127.0.0.1:9", "no-such-command"])
    assert usage.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    assert rocketha_admin.main(["--help"]) == 0
    assert "--controller" in capsys.readouterr().out
