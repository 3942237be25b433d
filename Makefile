# Serverless SSP2 sync backend: build, test, run, deploy helpers.
#
# `make run`  – local HTTP server over the same handlers with an embedded store
# `make test` – the whole suite (lint, vectors, unit, adapters, emulator tests)

SHELL := /bin/bash
GO ?= go
export GOFLAGS := -buildvcs=false

# The golden vectors live beside the repository in ../shared; tests read
# the wire-version 1–2 set from SSP2_VECTORS and the version-3 set from
# SSP2_VECTORS_V3.
ifneq ($(wildcard ../shared/ssp2-vectors),)
SSP2_VECTORS ?= $(abspath ../shared/ssp2-vectors)
endif
export SSP2_VECTORS
ifneq ($(wildcard ../shared/ssp2-vectors-v3),)
SSP2_VECTORS_V3 ?= $(abspath ../shared/ssp2-vectors-v3)
endif
export SSP2_VECTORS_V3

TOOLS_BIN := $(CURDIR)/.tools/bin
export PATH := $(TOOLS_BIN):$(PATH)

LAMBDA_FLAGS := -tags lambda.norpc -trimpath -ldflags "-s -w"
FUZZTIME ?= 30s

.PHONY: all test lint unit tools fuzz bench cost load load-dynamodb lambda-timing lambda-timing-compare run build clean realtime-image realtime-image-push \
	build-PushFunction build-PullFunction build-SegmentFunction build-PruneFunction build-BlobFunction \
	build-MigrateHookFunction build-FanoutFunction build-ReactionsFunction

all: build

## test: lint, then every Go test with the race detector (services started by scripts/testenv.sh)
test: lint
	./scripts/test.sh

lint: tools
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	staticcheck ./...
	@# cfn-lint (with the SAM translator) is on every machine of this project;
	@# a missing one fails the lint rather than skipping it.
	cfn-lint template.yaml

tools:
	@./scripts/tools.sh

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

## bench: codec, engine, store, auth and adapter benchmarks (internal/...), and
## the local runner's whole-request (BenchmarkRunner*) and realtime fanout
## (BenchmarkRealtimeFanout) benchmarks over loopback; BENCHTIME per benchmark
## (e.g. BENCHTIME=1x for a quick check that every benchmark still runs)
BENCHTIME ?= 1s
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./internal/...

## cost: issue 23's price of each operation on AWS (us-east-1 list prices,
## internal/costmodel/prices.go) from exact counts through the functions'
## handlers on DynamoDB Local and the S3 server (loopback, bounded): one
## table per operation, then `<operation> usd_per_million=<n>` lines
cost:
	@SSP2_COST=1 $(GO) test -count=1 -v -run '^TestCost$$' ./internal/costmodel/ | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$$' -e '^ok '; exit $${PIPESTATUS[0]}

## load: a fresh local runner under cmd/syncular-load (LOAD_ARGS, e.g.
## LOAD_ARGS="-mix quiet-pull -vus 10,50,100 -runs 3"; loopback only)
LOAD_ARGS ?= -mix push-pull -vus 10,50,100 -duration 10s
load:
	./scripts/load.sh $(LOAD_ARGS)

## load-dynamodb: issue 11's scale measurements on DynamoDB Local (bounded, loopback;
## SSP2_LOAD_ROWS rows, default 100000; SSP2_LOAD_SECONDS per writer count;
## then segment-download lookup cost at up to 6,001 publications of one segment)
load-dynamodb:
	SSP2_LOAD=1 $(GO) test -count=1 -v -run '^TestLoad$$' -timeout 60m ./internal/dynamostore/
	SSP2_LOAD=1 $(GO) test -count=1 -v -run '^TestLookupLoad$$' -timeout 30m ./internal/s3segments/

## lambda-timing: issue 15's cold init and warm invoke times of every function
## binary under aws-lambda-rie (DynamoDB Local and S3 from testenv; loopback,
## bounded). LAMBDA_TIMING_SRC=<module root> measures another tree's functions
## (a `git worktree add` of an older commit), LAMBDA_TIMING_OUT=<file.json>
## saves the results, LAMBDA_TIMING_BASELINE=<file.json> prints a saved run
## beside this one; LAMBDA_TIMING_COLD (5) and LAMBDA_TIMING_WARM (200).
lambda-timing:
	SSP2_LAMBDA_TIMING=1 SSP2_LAMBDA_TIMING_SRC="$(abspath $(LAMBDA_TIMING_SRC))" \
	SSP2_LAMBDA_TIMING_OUT="$(abspath $(LAMBDA_TIMING_OUT))" SSP2_LAMBDA_TIMING_BASELINE="$(abspath $(LAMBDA_TIMING_BASELINE))" \
	SSP2_LAMBDA_TIMING_COLD="$(LAMBDA_TIMING_COLD)" SSP2_LAMBDA_TIMING_WARM="$(LAMBDA_TIMING_WARM)" \
	$(GO) test -count=1 -v -run '^TestLambdaTiming$$' -timeout 60m ./functions/

## lambda-timing-compare: pool saved lambda-timing runs and print them side by
## side (LAMBDA_TIMING_BEFORE and LAMBDA_TIMING_AFTER: comma lists of JSON files)
lambda-timing-compare:
	SSP2_LAMBDA_TIMING_COMPARE="$(LAMBDA_TIMING_BEFORE)=$(LAMBDA_TIMING_AFTER)" \
	$(GO) test -count=1 -v -run '^TestLambdaTimingCompare$$' ./functions/

## run: the local runner on 127.0.0.1:8787
run:
	$(GO) run ./cmd/syncular-local $(ARGS)

## stack: the deployed shape on 127.0.0.1 (internal/stack): DynamoDB Local with
## its stream, an S3 API, every function under aws-lambda-rie behind a local
## API Gateway, the stream consumer feeding the fanout function, two realtime
## tier instances behind one /realtime address. Prints the URLs and a dev
## token; Ctrl-C stops everything. STACK_ARGS, e.g. STACK_ARGS="-port 0 -quiet".
STACK_ARGS ?=
.PHONY: stack fanout-load
stack:
	$(GO) run ./cmd/syncular-stack $(STACK_ARGS)

## fanout-load: issue 21 item 6 over `make stack`'s shape: one commit and one
## presence join reaching SSP2_FANOUT_SOCKETS (default 10000) sockets on one
## scope key across the two tier instances (p50/p95/max; bounded, loopback)
fanout-load:
	ulimit -n 65536 2>/dev/null || ulimit -n $$(ulimit -Hn); \
	SSP2_FANOUT_LOAD=1 SSP2_FANOUT_SOCKETS="$(SSP2_FANOUT_SOCKETS)" $(GO) test -count=1 -v -run '^TestFanoutLoad$$' -timeout 30m ./internal/stack/

build:
	$(GO) build ./...

# SAM BuildMethod: makefile targets. SAM sets ARTIFACTS_DIR. Each function
# package gets the bootstrap binary and the schema it serves (SCHEMA,
# default the bundled example; SYNC_SCHEMA_PATH defaults to schema.json
# next to bootstrap).
# VALIDATORS, when set, is a declarative validators document (§6.7,
# §6.8; docs/OPERATIONS.md "Validators") copied beside it as
# validators.json, which SYNC_VALIDATORS_PATH defaults to.
# FUNCTIONS_DIR holds the main packages of the push, pull, segment, blob
# and reactions functions: an app built with the public package syncular
# points it at its own (docs/APPS.md), e.g.
# FUNCTIONS_DIR=examples/customapp/functions sam build.
SCHEMA ?= examples/todo/schema.json
VALIDATORS ?=
FUNCTIONS_DIR ?= functions
define lambda_build
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./$(2)/$(1)
	cp $(SCHEMA) $(ARTIFACTS_DIR)/schema.json
	$(if $(VALIDATORS),cp $(VALIDATORS) $(ARTIFACTS_DIR)/validators.json)
endef
build-PushFunction:
	$(call lambda_build,push,$(FUNCTIONS_DIR))
build-PullFunction:
	$(call lambda_build,pull,$(FUNCTIONS_DIR))
build-SegmentFunction:
	$(call lambda_build,segment,$(FUNCTIONS_DIR))
build-PruneFunction:
	$(call lambda_build,prune,functions)
build-BlobFunction:
	$(call lambda_build,blob,$(FUNCTIONS_DIR))
build-MigrateHookFunction:
	$(call lambda_build,migratehook,functions)
build-FanoutFunction:
	$(call lambda_build,fanout,functions)
build-ReactionsFunction:
	$(call lambda_build,reactions,$(FUNCTIONS_DIR))

## realtime-image: the realtime tier's image without Docker: a static
## linux/$(REALTIME_ARCH) binary (arm64 for Fargate ARM64), SCHEMA and
## VALIDATORS (when set) in an image tarball, bin/syncular-realtime.tar
## (docs/REALTIME.md)
REALTIME_ARCH ?= arm64
REALTIME_IMAGE_TAR ?= bin/syncular-realtime.tar
# REALTIME_MAIN is the tier's main package: an app's own
# (syncular.App.RealtimeMain) runs its hooks on socket pushes too.
REALTIME_MAIN ?= ./cmd/syncular-realtime
realtime-image:
	mkdir -p bin
	CGO_ENABLED=0 GOOS=linux GOARCH=$(REALTIME_ARCH) $(GO) build -trimpath -ldflags "-s -w" -o bin/linux-$(REALTIME_ARCH)/syncular-realtime $(REALTIME_MAIN)
	$(GO) run ./cmd/syncular-realtime/imagetool -binary bin/linux-$(REALTIME_ARCH)/syncular-realtime -schema $(SCHEMA) \
		$(if $(VALIDATORS),-validators $(VALIDATORS)) -arch $(REALTIME_ARCH) -out $(REALTIME_IMAGE_TAR)

## realtime-image-push: push the tarball to IMAGE (an ECR URI with a tag);
## credentials from REGISTRY_USERNAME/REGISTRY_PASSWORD, e.g.
##   REGISTRY_USERNAME=AWS REGISTRY_PASSWORD=$$(aws ecr get-login-password) make realtime-image-push IMAGE=...
realtime-image-push: realtime-image
	@test -n "$(IMAGE)" || { echo "IMAGE=<registry>/<repository>:<tag> is required"; exit 1; }
	$(GO) run ./cmd/syncular-realtime/imagetool -push $(IMAGE) -out $(REALTIME_IMAGE_TAR)

clean:
	rm -rf bin .aws-sam
