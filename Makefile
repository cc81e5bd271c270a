# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all bench clean clean-cache

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# no pip cache: a fresh machine gains nothing from it, and it only takes disk
	$(PY) -m pip install --quiet --no-cache-dir --upgrade pip
	$(PY) -m pip install --quiet --no-cache-dir -e '.[ray,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/regal data info data/real/resnet50_infer_b1.npz
	mkdir -p out
	$(VENV)/bin/regal optimize data/real/resnet50_infer_b1.npz --devices 4 --budget 5000 \
		--method regal --out out/demo_solution.json --plot out/demo.png

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m ''

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
	$(MAKE) clean-cache

# numba's on-disk caches are keyed by the file that defines each compiled function only: after
# editing what one reads from another file (brkga/streams.py's constants for regal/breed.py,
# regal/search/draw_kernel.py for feature_kernels.py), clear them
clean-cache:
	find . -path ./$(VENV) -prune -o -name '*.nb[ic]' -print -delete
