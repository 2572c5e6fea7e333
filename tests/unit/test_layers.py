"""The layers the code keeps (issue 27, item 5): pyproject.toml's import-linter contracts,
run as `lint-imports` would (in a process of its own, from the repo root, so that the
packages it analyses are this checkout's). An import from a layer into one above it (e.g.
`import driver` in isa/), an import of hw from the model or the host stack, or an import
circle between the modules of a package fails here with import-linter's report."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINT = ("import sys\n"
        "from importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))\n")


def test_import_contracts_are_kept():
    done = subprocess.run([sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "Contracts: 3 kept, 0 broken." in report, report
