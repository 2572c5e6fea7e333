import pathlib
import sys

# the project's packages live at the repo root (also installed editable by `make venv`)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
