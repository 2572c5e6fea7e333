"""The type check and the lint of the Python (issue 27, item 8; tests/rtl/test_lint.py is the
Verilator lint's): mypy and ruff, configured in pyproject.toml, on the packages done, the list
`[tool.mypy] files` there. A package joins by its name in that list; from then on a function
without hints, a type error or a lint finding in it fails here with the tool's report. Each
tool runs as its command would, in a process of its own from the repository root; mypy keeps
its cache in .mypy_cache (cold about 15 s, a repeat run 2-3 s)."""
import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]


def _run(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def test_the_packages_done_are_listed() -> None:
    assert PACKAGES, "pyproject.toml [tool.mypy] files lists no package"
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), f"{package!r} in [tool.mypy] files is no package"


def test_mypy_finds_nothing() -> None:
    code, report = _run("mypy", "--no-error-summary")        # the files of [tool.mypy]
    assert code == 0, f"mypy on {', '.join(PACKAGES)}:\n{report}"


def test_ruff_finds_nothing() -> None:
    code, report = _run("ruff", "check", "--no-cache", *PACKAGES)
    assert code == 0, f"ruff check {' '.join(PACKAGES)}:\n{report}"
