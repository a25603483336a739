"""constraints.txt, the versions `make setup` installs into .venv: every package pyproject.toml
names (its dependencies and every extra's) is pinned there, to a version pyproject allows, so a
fresh clone installs what main's tests passed with and `make lock` cannot leave a pin behind."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt: {line!r} is not an exact pin (name==version)"
        found[canonicalize_name(name)] = Version(version)
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"].values()
    return [Requirement(r) for r in project["dependencies"] + [r for e in extras for r in e]]


def test_every_declared_package_is_pinned_to_a_version_pyproject_allows() -> None:
    pinned = pins()
    requirements = declared()
    assert len(requirements) >= 15  # (the dependencies and the extras were read)
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is in pyproject.toml but not constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside pyproject's {requirement}"
        )


def test_the_project_itself_is_not_pinned() -> None:
    # (an editable install of wmo-lake pinned to a version would fail on the next release)
    assert "wmo-lake" not in pins()


def test_setup_installs_with_the_constraints_and_reinstalls_when_they_change() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    target = re.search(r"^\$\(BIN\)/wmo-lake: (.*)$", makefile, re.M)
    assert target and "constraints.txt" in target.group(1).split()
    assert re.search(r"pip install -q -c constraints\.txt -e '\.\[\$\(EXTRAS\)\]'", makefile)
