# tritonfleet — make targets. `make help` lists them with their variables.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON    ?= python3
VENV      ?= .venv
PY        := $(VENV)/bin/python
TF        := $(VENV)/bin/tritonfleet
PYINFRA   := $(VENV)/bin/pyinfra
HOSTS     ?= 3
TYPES     ?= inf2.xlarge,trn1.2xlarge,g5.xlarge
INVENTORY ?= inventories/sandbox.py

# Python's bytecode cache, kept in the venv (not beside the sources). An environment that sets
# PYTHONDONTWRITEBYTECODE (this development machine's does) makes every Python process compile all it imports again:
# pyinfra, boto3, pydantic and ours take about 1.1 s of CPU to import that way and 0.45 s from the cache, and a `make
# test` starts some hundreds of them (pyinfra runs, CLI and agent runs).
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
PYTEST_ARGS ?=
ARGS      ?=
FLEET     ?= $(TRITONFLEET_FLEET)
REGION    ?= $(or $(TRITONFLEET_REGION),$(AWS_REGION))
TYPE      ?= inf2.xlarge
COUNT     ?= 1
SSH_CIDR  ?= $(TRITONFLEET_SSH_CIDR)
FLEET_ARGS ?=
BATCH     ?= 1
CANARY    ?= 1
FAIL_PERCENT ?= 0
DIR       ?= qa-selftest
TARGET    ?= cpu
# Debian packages the sandbox fleet needs on the controller.
# prometheus: the sandbox's Prometheus (README "Monitoring"; its checks of the dashboards)
# haproxy: `haproxy -c` checks the lb role's rendered configuration (tests/fake/test_lb_role.py)
APT_PACKAGES := mmdebstrap systemd-container iproute2 apt-utils gnupg dpkg-dev curl procps prometheus haproxy

.PHONY: help setup setup-triton prereqs sandbox-prefetch demo test test-unit test-pure test-fake test-triton test-sandbox test-e2e lint lb mutate bench-converge bench-sync bench-qa bench-live bench-rollout bench-release qa-selftest-repo models release release-rollout serve rollout fleet-up fleet-down fleet-list autoscale qa qa-schedule qa-unschedule monitoring monitoring-targets sandbox-up sandbox-boot sandbox-down sandbox-status status gen-model bench clean

help: ## List targets and their variables
	@echo "tritonfleet make targets:"
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'
	@echo
	@echo "Variables:"
	@echo "  HOSTS=$(HOSTS)           number of sandbox hosts (sandbox-up)"
	@echo "  TYPES=$(TYPES)   instance type per host, comma separated (sandbox-up, demo)"
	@echo "  HOST=sbx-01 USER_DATA=file INSTANCE_ID=i-...   sandbox-boot: the host, its user data script, the instance id it boots as"
	@echo "  INVENTORY=$(INVENTORY)   pyinfra inventory (serve, models, qa, qa-schedule, monitoring, status)"
	@echo "  PREVIOUS=1           status: also show what a rollback would return to"
	@echo "  PROMETHEUS=url       status: exporters up or not, read from this Prometheus"
	@echo "  OUT=monitoring       monitoring-targets: directory of the target files and prometheus.yml"
	@echo "  BATCH=$(BATCH) CANARY=$(CANARY) FAIL_PERCENT=$(FAIL_PERCENT)   rollout: hosts per batch, canary hosts first, stop above this % failed"
	@echo "  TARGET_GROUP=arn REGION=...   rollout: ELBv2 target group the hosts leave while they change"
	@echo "  LB=elbv2|haproxy CANARY_WEIGHT=10 BAKE=120 PROMETHEUS=url   rollout: load balancer; traffic canary judged by Prometheus"
	@echo "  MAX_ERROR_RATIO=0.01 MAX_LATENCY_RATIO=1.5 LISTENER_ARN/RULE_ARN/CANARY_TARGET_GROUP   rollout: canary gates; ELBv2 canary"
	@echo "  FLEET=name           EC2 fleet (fleet-up, fleet-down, fleet-list, autoscale; or TRITONFLEET_FLEET)"
	@echo "  REGION=us-east-1     AWS region (fleet-*, autoscale, rollout, release; or TRITONFLEET_REGION, AWS_REGION)"
	@echo "  TYPE=$(TYPE)      instance type (fleet-up)"
	@echo "  COUNT=$(COUNT)              instances of TYPE the fleet should have (fleet-up)"
	@echo "  SSH_CIDR=a.b.c.d/32  who may SSH to the fleet, required (fleet-up; or TRITONFLEET_SSH_CIDR)"
	@echo "  FLEET_ARGS=...       more fleet up options, e.g. '--triton-source-sg sg-... --models-s3-uri s3://...'"
	@echo "  YES=1                fleet-down: do not ask for confirmation"
	@echo "  TARGET_QUEUE_MS=20 MIN=2 MAX=10   autoscale: average Triton queue time per request to hold, group sizes"
	@echo "  PYTEST_ARGS=...      extra pytest arguments (test), e.g. PYTEST_ARGS='-k placement'"
	@echo "  ARGS=...             arguments passed through (gen-model, bench-sync, bench-qa, bench-live, bench-rollout, bench-release, mutate)"
	@echo "  VERIFY=1             models: hash every file of the current version against its manifest, repair what differs"
	@echo "  RELEASE=v2|s3://b/p/v2 GROUP=canary   release: what pull-mode hosts serve; only that group's pointer with GROUP"
	@echo "  WAIT=120 NO_QA=1     release-rollout: seconds per phase for the hosts to serve; skip the QA gate (GROUP, ROOT, PROMETHEUS, BAKE, MAX_*_RATIO as above)"
	@echo "  ROOT=s3://b/p ENDPOINT=url   release: the hosts' models_s3_uri (or TRITONFLEET_MODELS_ROOT; default: RELEASE's parent), an S3-compatible store"
	@echo "  MODULES=a.py b.py    mutate: these of [tool.mutmut] only_mutate (pyproject.toml) instead of all"
	@echo "  DIR=$(DIR) TARGET=$(TARGET)   qa-selftest-repo: where the self-test repository goes, and its target"
	@echo "  VENV=$(VENV) PYTHON=$(PYTHON)"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	@touch $@

# The real-Triton layer, the sandbox and the benchmarks also want torch and the Triton 2.51 binaries (extras
# triton and sandbox, some GB); the pure and @fake layers and lint do not. One pip run for all of it (a clean
# clone's `make test` resolves once, not twice); it makes the light setup's stamp too. --no-compile: Python
# compiles what is imported when it is first imported, not the thousands of files of torch and the rest.
$(VENV)/.installed-triton: pyproject.toml
	test -x $(VENV)/bin/pip || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --no-compile -e '.[test,triton,sandbox]'
	@touch $(VENV)/.installed $@

setup: $(VENV)/.installed ## Create .venv with the project and its light test tools: pure and @fake layers, lint (no root needed)

setup-triton: $(VENV)/.installed-triton ## setup, plus torch and Triton 2.51 (nvidia-pytriton) for the real-Triton layer, the sandbox and benchmarks

prereqs: ## Install the Debian packages the sandbox fleet needs on this machine (root)
	@set -e; missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "apt: installing$$missing"; apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi

# Started before setup-triton, with the system's python3 (tritonfleet/sandbox/prefetch.py needs only the standard
# library): on an empty cache the sandbox's two mmdebstrap builds run while pip installs the venv, and the fleet's
# first `up` waits for what is still building. Not root: nothing to do (the sandbox says so itself).
sandbox-prefetch: prereqs ## Start building the sandbox's base images in the background (log: <state dir>/logs/prefetch.log)
	@$(PYTHON) -m tritonfleet.sandbox.prefetch --background

demo: prereqs sandbox-prefetch setup-triton ## Bring up the sandbox (Triton hosts and the lb host), serve, put HAProxy in front, print what serves where
	@$(PY) -m tritonfleet.sandbox.prefetch --wheels --background
	$(TF) sandbox up --instance-type $(TYPES)
	$(PYINFRA) -y $(INVENTORY) deploys/serve.py
	$(PYINFRA) -y $(INVENTORY) deploys/lb.py
	@$(PY) -c "from tritonfleet.sandbox.inventory import sandbox_hosts as h; [print('front door', n, 'http://%s:8000  grpc %s:8001  metrics http://%s:8405/metrics' % ((d['ssh_hostname'],) * 3)) for n, d in h(accelerated=False)]"
	$(TF) status --inventory $(INVENTORY)

test: prereqs sandbox-prefetch setup-triton ## Run the whole test suite, e2e on the sandbox fleet included (the sandbox fleet's tests on two workers, the rest on a third and at the end on all three)
	@$(PY) -m tritonfleet.sandbox.prefetch --wheels --background
	@rm -f .pytest-exit-code; $(VENV)/bin/pytest -n 3 --dist loadgroup --durations=25 $(PYTEST_ARGS); rc=$$?; echo $$rc > .pytest-exit-code; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests (exit 5)" >&2; fi; exit $$rc

test-unit: setup ## Tests that need no root and no sandbox: pure logic and @fake deploys
	$(VENV)/bin/pytest -m 'pure or fake' $(PYTEST_ARGS)

test-pure: setup ## Layer 1: pure logic (tests/unit, but the sandbox builders)
	$(VENV)/bin/pytest -m pure $(PYTEST_ARGS)

test-fake: setup ## Layer 2: @fake pyinfra deploys and table-driven operations (tests/fake)
	$(VENV)/bin/pytest -m fake $(PYTEST_ARGS)

test-triton: setup-triton ## Layer 3: real Triton 2.51 on the CPU (tests/genmodel)
	$(VENV)/bin/pytest -m triton $(PYTEST_ARGS)

test-sandbox: prereqs setup-triton ## The sandbox's own builders: signed repos, stand-ins, images (tests/unit/test_sandbox_*; root)
	$(VENV)/bin/pytest -m sandbox $(PYTEST_ARGS)

test-e2e: prereqs setup-triton ## Layer 4: the sandbox fleet, real hosts (tests/e2e; root)
	$(VENV)/bin/pytest -m e2e $(PYTEST_ARGS)

lint: setup ## ruff over the whole tree, mypy over tritonfleet/ and roles/ (pyproject [tool.mypy])
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

mutate: setup ## Mutation testing report (mutmut; pure and @fake tests): mutate-report.md; MODULES=... for a subset
	nice -n 19 $(PY) tools/mutate.py $(if $(MODULES),--modules '$(MODULES)') $(ARGS)

sandbox-up: prereqs setup-triton ## Bring up the sandbox fleet (HOSTS, TYPES)
	$(TF) sandbox up --hosts $(HOSTS) --instance-type $(TYPES)

sandbox-boot: prereqs setup-triton ## Boot sandbox host HOST on a fresh disk from USER_DATA, as cloud-init runs a launch template's (INSTANCE_ID: the id it boots as)
	@test -n "$(HOST)" && test -n "$(USER_DATA)" || { echo "usage: make sandbox-boot HOST=sbx-01 USER_DATA=user-data.sh [INSTANCE_ID=i-...]" >&2; exit 2; }
	$(TF) sandbox boot '$(HOST)' --user-data '$(USER_DATA)' $(if $(INSTANCE_ID),--instance-id '$(INSTANCE_ID)')

sandbox-down: setup ## Tear the sandbox fleet down, leaving no trace
	$(TF) sandbox down

sandbox-status: setup ## Show the sandbox fleet
	$(TF) sandbox status

lb: setup ## HAProxy on INVENTORY's lb group in front of its Triton servers (deploys/lb.py)
	$(PYINFRA) -y $(INVENTORY) deploys/lb.py

serve: setup ## Provision and serve INVENTORY (deploys/serve.py)
	$(PYINFRA) -y $(INVENTORY) deploys/serve.py

models: setup ## Update INVENTORY's model repositories from S3, reloading changed models live (deploys/models.py); VERIFY=1 hashes every file and repairs
	$(PYINFRA) -y $(INVENTORY) deploys/models.py $(if $(VERIFY),--data models_s3_verify=true)

release: setup ## Point pull-mode hosts at RELEASE: writes ROOT's RELEASE pointer (GROUP=canary: RELEASE.canary only); ENDPOINT, REGION
	@test -n "$(RELEASE)" || { echo "make release RELEASE=v2|s3://bucket/prefix/v2 [GROUP=canary] [ROOT=s3://bucket/prefix]" >&2; exit 2; }
	$(TF) models release '$(RELEASE)' $(if $(ROOT),--root '$(ROOT)') $(if $(GROUP),--group '$(GROUP)') \
	  $(if $(ENDPOINT),--endpoint-url '$(ENDPOINT)') $(if $(REGION),--region $(REGION))

release-rollout: setup ## Canary release to INVENTORY's pull-mode hosts: RELEASE.$(GROUP) first, gates (QA; PROMETHEUS, BAKE), then the fleet; rolls the canary back on a failed gate
	@test -n "$(RELEASE)" || { echo "make release-rollout RELEASE=v2 [GROUP=canary] [ROOT=s3://bucket/prefix] [PROMETHEUS=url BAKE=120] [WAIT=120] [NO_QA=1]" >&2; exit 2; }
	$(TF) models rollout '$(RELEASE)' --inventory $(INVENTORY) $(if $(GROUP),--group '$(GROUP)') $(if $(ROOT),--root '$(ROOT)') \
	  $(if $(ENDPOINT),--endpoint-url '$(ENDPOINT)') $(if $(REGION),--region $(REGION)) $(if $(WAIT),--wait $(WAIT)) \
	  $(if $(NO_QA),--no-qa) $(if $(PROMETHEUS),--prometheus $(PROMETHEUS)) $(if $(BAKE),--bake $(BAKE)) \
	  $(if $(MAX_ERROR_RATIO),--max-error-ratio $(MAX_ERROR_RATIO)) $(if $(MAX_LATENCY_RATIO),--max-latency-ratio $(MAX_LATENCY_RATIO))

rollout: setup ## Rolling rollout of deploys/serve.py over INVENTORY: BATCH, CANARY, FAIL_PERCENT, LB, TARGET_GROUP, CANARY_WEIGHT, BAKE, PROMETHEUS
	$(TF) rollout --inventory $(INVENTORY) --batch $(BATCH) --canary $(CANARY) --fail-percent $(FAIL_PERCENT) \
	  $(if $(LB),--lb $(LB)) $(if $(TARGET_GROUP),--target-group $(TARGET_GROUP)) $(if $(REGION),--region $(REGION)) \
	  $(if $(CANARY_WEIGHT),--canary-weight $(CANARY_WEIGHT)) $(if $(BAKE),--bake $(BAKE)) \
	  $(if $(PROMETHEUS),--prometheus $(PROMETHEUS)) $(if $(MAX_ERROR_RATIO),--max-error-ratio $(MAX_ERROR_RATIO)) \
	  $(if $(MAX_LATENCY_RATIO),--max-latency-ratio $(MAX_LATENCY_RATIO)) $(if $(LISTENER_ARN),--listener-arn $(LISTENER_ARN)) \
	  $(if $(RULE_ARN),--rule-arn $(RULE_ARN)) $(if $(CANARY_TARGET_GROUP),--canary-target-group $(CANARY_TARGET_GROUP))

fleet-up: setup ## Launch COUNT x TYPE into EC2 fleet FLEET (REGION, SSH_CIDR, FLEET_ARGS); waits for SSH
	$(TF) fleet up $(if $(FLEET),--fleet $(FLEET)) $(if $(REGION),--region $(REGION)) --type $(TYPE) --count $(COUNT) $(if $(SSH_CIDR),--ssh-cidr $(SSH_CIDR)) $(FLEET_ARGS)

fleet-down: setup ## Remove everything tagged for EC2 fleet FLEET (REGION; YES=1 to skip the question)
	$(TF) fleet down $(if $(FLEET),--fleet $(FLEET)) $(if $(REGION),--region $(REGION)) $(if $(YES),--yes)

fleet-list: setup ## Table of FLEET's EC2 instances (every fleet's without FLEET)
	$(TF) fleet list $(if $(FLEET),--fleet $(FLEET)) $(if $(REGION),--region $(REGION))

autoscale: setup ## Scale FLEET's Auto Scaling group on Triton queue time: TARGET_QUEUE_MS, MIN, MAX (REGION)
	$(TF) fleet autoscale $(if $(FLEET),--fleet $(FLEET)) $(if $(REGION),--region $(REGION)) \
	  $(if $(TARGET_QUEUE_MS),--target-queue-ms $(TARGET_QUEUE_MS)) $(if $(MIN),--min $(MIN)) $(if $(MAX),--max $(MAX))

qa: setup ## Run the QA suites on INVENTORY's hosts now; reports to reports/<host>/ and a fleet table (deploys/qa.py)
	$(PYINFRA) -y $(INVENTORY) deploys/qa.py

qa-schedule: setup ## Scheduled QA on INVENTORY's hosts: systemd timer, reports to S3, textfile metric
	$(PYINFRA) -y $(INVENTORY) deploys/qa_schedule.py

qa-unschedule: setup ## Remove scheduled QA from INVENTORY's hosts
	$(PYINFRA) -y $(INVENTORY) deploys/qa_unschedule.py

monitoring: setup ## Prometheus exporters on INVENTORY's hosts (node; neuron-monitor; DCGM) (deploys/monitoring.py)
	$(PYINFRA) -y $(INVENTORY) deploys/monitoring.py

monitoring-targets: setup ## Prometheus file_sd targets and a prometheus.yml for INVENTORY into OUT (default monitoring/)
	$(TF) monitoring targets --inventory $(INVENTORY) --out $(or $(OUT),monitoring) --scrape-config

status: setup ## Table of every host and Triton server in INVENTORY (PREVIOUS=1: rollback targets; PROMETHEUS=url: exporters)
	$(TF) status --inventory $(INVENTORY) $(if $(PREVIOUS),--previous) $(if $(PROMETHEUS),--prometheus $(PROMETHEUS))

gen-model: setup ## Generate a Triton model directory (ARGS='--model_type pytorch ...')
	$(TF) gen-model $(ARGS)

bench-converge: prereqs setup-triton ## Converge cost on the sandbox at 1/3/8 hosts and --dry over 200/1000 @fake hosts (root)
	$(PY) bench/converge.py

bench-sync: setup-triton ## S3 sync: tritonfleet-agent vs aws s3 sync vs s5cmd on one moto server, full and no-op (ARGS='--quick')
	$(PY) bench/sync.py $(ARGS)

bench-qa: setup-triton ## QA runner throughput vs perf_analyzer on the real Triton (CPU); ARGS='--concurrency 9 --protocol http'
	$(PY) bench/qa.py $(ARGS)

bench-live: setup-triton ## Clients of an unchanged model during live updates: agent loads over gRPC vs HTTP, real Triton (CPU)
	$(PY) bench/live.py $(ARGS)

bench-rollout: prereqs setup-triton ## Rollouts through the sandbox's HAProxy under a 60 req/s client: failed requests, time per batch, canary share, breach to rollback, vs no balancer (root; ARGS='--rate 80')
	$(PY) bench/rollout.py $(ARGS)

bench-release: prereqs setup-triton ## Model releases on 8 sandbox hosts: pull mode vs push (models.py) vs copy + docker restart, time to all serving, failed requests, no-op cost (root; ARGS='--quick')
	$(PY) bench/release.py $(ARGS)

qa-selftest-repo: setup-triton ## Write the QA self-test model repository and suites: DIR=... TARGET=cpu|inf1|inf2|trn1|trn2
	$(PY) -m tritonfleet.genmodel.selftest $(DIR) --target $(TARGET)

bench: setup-triton ## Benchmarks (ratios against the named peer, measured in the same run)
	@ls bench/*.py >/dev/null 2>&1 || { echo "no benchmarks yet (bench/*.py)"; exit 0; }; \
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean: ## Remove the venv and caches in the checkout (not the sandbox cache)
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info mutants
