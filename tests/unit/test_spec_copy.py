"""The interface contract in the repository (issue 27, item 1): docs/spec/read-compute.md is a
byte copy of ../shared/spec/read-compute.md, the contract the RTL, the model and the driver
are held to. Where that file is present (the development tree, CI) the copy must equal it
byte for byte; in a clone without it, the copy must still carry the contract's title and its
six normative sections, each with text under it.

Beside it, the front door: README.md points at the copy rather than at ../shared paths a
clone does not have, every relative link in README.md and docs/*.md names a file that exists,
every `make <target>` and `plora <command>` the README and docs/commands.md name exists
(the Makefile's targets, the CLI's commands), and `make` alone is `make help`."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
COPY = ROOT / "docs" / "spec" / "read-compute.md"
SHARED = ROOT.parent / "shared" / "spec" / "read-compute.md"

TITLE = "# The read-compute interface, version 1"
# the contract's normative sections, as its headings read
NORMATIVE = (
    "## 1. The descriptor (normative)",
    "## 2. Queues in HDM (normative)",
    "## 3. Registers over CXL.io (normative)",
    "## 4. Status codes and bad input (normative)",
    "## 5. Top-level ports (normative)",
    "## 6. Several DRAM channels (normative when `DRAM_CHANNELS` > 1)",
)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/spec/read-compute.md is not beside this checkout")
def test_copy_equals_the_shared_spec():
    assert COPY.read_bytes() == SHARED.read_bytes(), (
        f"{COPY.relative_to(ROOT)} differs from {SHARED}: copy it again (cp {SHARED} {COPY.relative_to(ROOT)})")


def test_copy_has_the_normative_sections():
    lines = COPY.read_text(encoding="utf-8").splitlines()
    assert lines[0] == TITLE
    headings = [i for i, line in enumerate(lines) if line.startswith("## ")]
    for heading in NORMATIVE:
        assert heading in lines, f"{COPY.relative_to(ROOT)} lacks the section {heading!r}"
        start = lines.index(heading)
        end = next((i for i in headings if i > start), len(lines))
        body = [line for line in lines[start + 1:end] if line.strip()]
        assert len(body) >= 3, f"{heading!r} has no text under it"
    # the sections in the contract's order
    assert [lines.index(h) for h in NORMATIVE] == sorted(lines.index(h) for h in NORMATIVE)


# ---- the front door's links and commands --------------------------------------------------

FRONT = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        yield target.split("#")[0]


@pytest.mark.parametrize("page", FRONT, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    missing = [t for t in _relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_readme_points_inside_the_clone():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "../shared/" not in text, "README.md points at ../shared, which a clone does not have"
    assert "docs/spec/read-compute.md" in text and "docs/glossary.md" in text


def _make_targets():
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][a-z-]*):", text, re.M))


def _plora_commands():
    """The subcommands of the `plora` entry point that pyproject.toml names (a click group)."""
    import importlib
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, attr = scripts["plora"].partition(":")
    return set(getattr(importlib.import_module(module), attr).commands)


@pytest.mark.parametrize("page", ["README.md", "docs/commands.md"])
def test_named_commands_exist(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    named = set(re.findall(r"(?:^|[`\s])make ([a-z][a-z-]*)", text, re.M))
    assert named, f"{page} names no make target"
    missing = named - _make_targets()
    assert not missing, f"{page} names make targets the Makefile lacks: {sorted(missing)}"
    # `plora <command>` as a command line writes it (not `system=plora` in a printed line)
    used = set(re.findall(r"(?:^|[`\s/])plora ([a-z][a-z-]*)", text, re.M))
    assert used, f"{page} names no plora command"
    missing = used - _plora_commands()
    assert not missing, f"{page} names plora commands the CLI lacks: {sorted(missing)}"


def test_make_help_is_the_default_target():
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    first = re.search(r"^([a-z][a-z-]*):", text, re.M)
    assert first and first.group(1) == "help", "make alone must print make help"
