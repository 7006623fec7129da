"""`llmgw <plugin>` where the plugin's package is not installed (the runtime image has no `eval`)."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from gateway import cli


def test_a_missing_plugin_package_is_a_clear_exit_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = EntryPoint(name="sim", value="no_such_package.cli:register", group="llmgw.commands")
    monkeypatch.setattr(cli, "_plugin_commands", lambda: {"sim": missing})
    with pytest.raises(SystemExit) as exc:
        cli.main(["sim", "--help"])
    assert exc.value.code == 2
    assert "llmgw sim: not installed" in capsys.readouterr().err
