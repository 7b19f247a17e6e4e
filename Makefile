# Every target sets up (or reuses) the project's own virtual environment: nothing relies on
# packages installed by hand.
VENV   ?= .venv
PYTHON ?= python3
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo live test lint broker-start broker-stop clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

## The main job on the embedded default: no broker needed.
demo: $(STAMP)
	$(VENV)/bin/leap-stream demo

## The streaming product: a local broker, one worker and the example scheduler, the demo fleet
## streamed through them in a live view, then the demo's summary table.
live: $(STAMP)
	deploy/kafka/broker start >/dev/null
	$(VENV)/bin/leap-stream demo --live --out out/live-demo --bootstrap $$(deploy/kafka/broker bootstrap)

## The whole test suite, integration tests included, against a real local Kafka broker.
## PYTEST_ARGS narrows it: make test PYTEST_ARGS="tests/test_cli.py tests/integration"
test: $(STAMP)
	deploy/kafka/broker start >/dev/null
	LEAP_KAFKA_BOOTSTRAP=$$(deploy/kafka/broker bootstrap) $(VENV)/bin/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

broker-start:
	deploy/kafka/broker start

broker-stop:
	deploy/kafka/broker stop

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
