"""Where config and data live when no option or DIANA_* variable names them: the XDG base
directories, as their spec reads them, then the defaults under the home directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from diana.core.config.settings import Paths

VARIABLES = ("DIANA_CONFIG_DIR", "DIANA_DATA_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory of the test's own, with none of the variables set."""
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_xdg_base_directories_hold_config_and_data(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    paths = Paths.resolve()
    assert paths.config_dir == tmp_path / "xdg-config" / "diana"
    assert paths.data_dir == tmp_path / "xdg-data" / "diana"
    assert paths.database == tmp_path / "xdg-data" / "diana" / "diana.db"


def test_each_base_directory_is_read_on_its_own(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    paths = Paths.resolve()
    assert paths.config_dir == home / ".config" / "diana"
    assert paths.data_dir == tmp_path / "xdg-data" / "diana"


def test_without_the_variables_the_defaults_are_under_home(home: Path) -> None:
    paths = Paths.resolve()
    assert paths.config_dir == home / ".config" / "diana"
    assert paths.data_dir == home / ".local" / "share" / "diana"


@pytest.mark.parametrize("value", ["", "relative/config", "~/config"])
def test_an_empty_or_relative_base_directory_is_ignored(
    home: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", value)
    monkeypatch.setenv("XDG_DATA_HOME", value)
    paths = Paths.resolve()
    assert paths.config_dir == home / ".config" / "diana"
    assert paths.data_dir == home / ".local" / "share" / "diana"


def test_the_diana_variables_come_before_the_base_directories(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("DIANA_CONFIG_DIR", str(tmp_path / "diana-config"))
    monkeypatch.setenv("DIANA_DATA_DIR", str(tmp_path / "diana-data"))
    paths = Paths.resolve()
    assert paths.config_dir == tmp_path / "diana-config"
    assert paths.data_dir == tmp_path / "diana-data"


def test_the_options_come_before_everything(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("DIANA_CONFIG_DIR", str(tmp_path / "diana-config"))
    monkeypatch.setenv("DIANA_DATA_DIR", str(tmp_path / "diana-data"))
    paths = Paths.resolve(tmp_path / "given-config", tmp_path / "given-data")
    assert paths.config_dir == tmp_path / "given-config"
    assert paths.data_dir == tmp_path / "given-data"


def test_a_config_dir_in_the_base_directory_is_checked_like_any_other(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "xdg-config").mkdir()
    (tmp_path / "xdg-config" / "diana").write_text("{}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    from diana.core.config.settings import ConfigError

    with pytest.raises(ConfigError, match="is a regular file, not a directory"):
        Paths.resolve()
