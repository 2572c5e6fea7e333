"""`python -m plora_cli`: `plora` (the Makefile's targets run it so)."""
from . import main

main()
