"""Area, power and timing of the NDP core from its own RTL (issue 13): a 45 nm cell library
written from published cell areas (`cells.py`), per-block logic synthesis with the
memories kept out (`synth.py`)."""
