"""Every malformed profile in tests/profiles_bad/ fails with its expected one-line message."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from profile_machines import CORPUS_MACHINE

from parinfo.errors import ProfileError
from parinfo.profiles.loading import load_profile, resolve_profile

CORPUS = Path(__file__).resolve().parent / "profiles_bad"
EXPECTED: dict[str, str] = yaml.safe_load((CORPUS / "expected.yaml").read_text())
FILES = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name != "expected.yaml")


def _error_line(path: Path) -> str:
    with pytest.raises(ProfileError) as info:
        resolve_profile(path, CORPUS_MACHINE)
    return str(info.value).replace(str(CORPUS) + "/", "")


def test_corpus_is_large_and_fully_described():
    assert len(FILES) >= 40
    assert sorted(EXPECTED) == FILES


@pytest.mark.parametrize("name", FILES)
def test_malformed_profile_gives_its_expected_line(name):
    line = _error_line(CORPUS / name)
    assert line == EXPECTED[name]
    assert "\n" not in line
    assert line.endswith(")"), "every message carries its fix"


@pytest.mark.parametrize("name", FILES)
def test_error_names_the_file_and_position(name):
    line = _error_line(CORPUS / name)
    file_part = line.split(":", 1)[0]
    assert file_part.endswith(".yaml")
    if name not in ("empty.yaml", "only_comments.yaml"):
        assert line.split(":")[1].isdigit() and line.split(":")[2].isdigit(), line


def test_directory_is_refused(tmp_path):
    d = tmp_path / "profile.yaml"
    d.mkdir()
    with pytest.raises(ProfileError, match=r"profile\.yaml: is a directory, not a profile file \(give the path"):
        load_profile(d)


def test_very_large_file_is_refused_before_parsing(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("version: 1\n" + "# padding\n" * 10_000)
    with pytest.raises(ProfileError, match=r"big\.yaml: file is larger than 64 KiB"):
        load_profile(p)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(ProfileError, match=r"nope\.yaml: no such file"):
        load_profile(tmp_path / "nope.yaml")
    with pytest.raises(ProfileError, match=r"no shipped profile named 'throughtput' \(did you mean 'throughput'\?"):
        load_profile("throughtput")


def test_unreadable_file(tmp_path, monkeypatch):
    p = tmp_path / "secret.yaml"
    p.write_text("version: 1\n")

    def refuse(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("parinfo.profiles.yaml_nodes.os.open", refuse)
    with pytest.raises(ProfileError, match=r"secret\.yaml: permission denied \(make the file readable\)"):
        load_profile(p)
