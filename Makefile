# Set-up is part of every target: a fresh machine needs only python3 (3.11+) and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install crawl test demo bench lint format clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-r requirements.txt -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Crawl every enabled source of sources.yaml into data/vesti.db: the feeds, then the
# Telegram channels (none is enabled in the shipped registry).
crawl: $(STAMP)
	$(BIN)/scrapy crawl feeds
	$(BIN)/scrapy crawl telegram

# The whole test suite (it starts its own servers on 127.0.0.1; no internet needed).
test: $(STAMP)
	$(BIN)/python -m pytest

# Serve tests/fixtures/site on 127.0.0.1 and crawl it into demo-data/ (offline).
demo: $(STAMP)
	$(BIN)/python -m vesti_scrapy demo

# The crawl benchmark, a few minutes: ours against the floor and lemon24's reader on a
# fixture site served on 127.0.0.1-16 (no internet needed); writes bench/results.md.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-r requirements-bench.txt -c requirements.txt
	$(BIN)/python -m bench.run --sizes 200,1000 --million --out bench/results.md

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
