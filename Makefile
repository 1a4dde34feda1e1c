# Shade: a peer-to-peer cache mesh for deep-learning training data.
#
#   make demo    the main job: a local 3-peer mesh serving Fashion-MNIST to a
#                real PyTorch training run, v2 beside no cache and perm + MinIO
#   make test    every test (installs what the tests need)
#   make bench   Go benchmarks and the side-by-side comparison with redis-server

GO       ?= go
BIN      := bin
DATA     := .data
FMNIST   := $(DATA)/fashion-mnist

PYTHON   := /usr/bin/python3
DEMO_EPOCHS ?= 3

.PHONY: docs all build test test-go test-python fuzz bench bench-socket bench-training deps-test deps-demo demo fmnist clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Debian packages, installed only where missing.
PY_PKGS := python3-redis python3-hiredis python3-numpy python3-torch python3-pil python3-matplotlib
deps-test:
	@./.ci/deps.sh redis-server redis-tools dataset-fashion-mnist iproute2 \
		python3-pytest python3-msgpack $(PY_PKGS)
	@./.ci/versitygw.sh >/dev/null   # the S3 server of the S3 tests, built once per machine

deps-demo:
	@./.ci/deps.sh redis-tools dataset-fashion-mnist $(PY_PKGS)

test: deps-test test-go test-python fuzz

# One package at a time: the mesh's, chaos, e2e and S3 packages each run
# meshes of peers (in process, or as processes with trainers). Run side by
# side under the race detector on 2 cores, a mesh test's bounded wait for
# a delivery ran out in two CI runs of four; alone, and beside two busy
# loops, those tests passed every time.
test-go:
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...

test-python: build
	SHADE_BIN_DIR=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q client/python/tests

# The main job: a local mesh of 3 peers serving Fashion-MNIST to 3 PyTorch
# ranks, the v2 sampler (importance-weighted, cache-aware draws) + the
# order-aware policy, then no cache at all, then uniform permutations +
# MinIO (CoorDL's baseline), at a cache of 10% of the training set; a live
# line per epoch, then the table side by side.
demo: deps-demo build fmnist
	$(PYTHON) test/train/compare.py --epochs $(DEMO_EPOCHS) --fractions 0.1 \
		--configs v2,nocache,perm+minio --data $(FMNIST) --out $(DATA)/demo

fmnist: $(FMNIST)/.shade-import.json

# The slow benchmark behind test/results/pads-v2 (about 80 minutes on 2
# cores): seven sampling + cache configurations, 3 seeds, 10 epochs, caches
# of 10% and 20%, on a quarter of the training set; then the time to 86%
# test accuracy over a source with 20 ms reads.
bench-training: deps-demo build fmnist
	$(PYTHON) test/train/compare.py --subset 0.25 --epochs 10 --seeds 0,1,2 --fractions 0.1,0.2 \
		--configs perm+minio,replacement+order,pads+app,pads+order,v2,v2-ahead,v2-noweights \
		--target-accuracy 0.86 --data $(FMNIST) --out test/results/pads-v2
	$(PYTHON) test/train/compare.py --subset 0.25 --epochs 10 --seeds 0,1,2 --fractions 0.1 \
		--configs v2,v2-ahead,perm+minio,nocache --throttle latency=20ms --throttled-only --target-accuracy 0.86 \
		--data $(FMNIST) --out test/results/pads-v2/throttled

# Each fuzz target runs a fixed number of inputs (about 10 s each on a
# 2-core machine). Counts, not durations: a duration-based -fuzztime can
# fail spuriously with "context deadline exceeded" in Go 1.26's fuzz
# coordinator (golang/go#75804). FUZZX scales every count.
FUZZX ?= 1
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseCommands$$' -fuzztime $$((2000*$(FUZZX)))x ./transport/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $$((200000*$(FUZZX)))x ./protocol/samplekey/
	$(GO) test -run '^$$' -fuzz '^FuzzShard$$' -fuzztime $$((3000*$(FUZZX)))x ./dataset/shards/
	$(GO) test -run '^$$' -fuzz '^FuzzScanTar$$' -fuzztime $$((30000*$(FUZZX)))x ./dataset/shards/
	$(GO) test -run '^$$' -fuzz '^FuzzReport$$' -fuzztime $$((100000*$(FUZZX)))x ./sampling/
	$(GO) test -run '^$$' -fuzz '^FuzzTableUnmarshal$$' -fuzztime $$((100000*$(FUZZX)))x ./sampling/
	$(GO) test -run '^$$' -fuzz '^FuzzStore$$' -fuzztime $$((20000*$(FUZZX)))x ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime $$((20000*$(FUZZX)))x ./transport/peer/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckMsgpack$$' -fuzztime $$((100000*$(FUZZX)))x ./transport/peer/
	$(GO) test -run '^$$' -fuzz '^FuzzMetaUnmarshal$$' -fuzztime $$((100000*$(FUZZX)))x ./mesh/member/
	$(GO) test -run '^$$' -fuzz '^FuzzFetchDecode$$' -fuzztime $$((100000*$(FUZZX)))x ./mesh/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzOfferDecode$$' -fuzztime $$((100000*$(FUZZX)))x ./mesh/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzResidentSet$$' -fuzztime $$((100000*$(FUZZX)))x ./mesh/wire/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1s ./store/ ./policy/ ./sampling/

bench-socket: build
	./test/bench/socket_vs_redis.sh

$(FMNIST)/.shade-import.json: | build
	$(BIN)/shadectl dataset import-idx --dst $(FMNIST)

# The configuration reference, generated from the daemon's flags.
docs: build
	$(BIN)/shade-peer --flags-markdown > docs/configuration.md

clean:
	rm -rf $(BIN)

# Chaos (test/chaos): SIGKILL and restart peers of a local 5-peer mesh for
# 120 s under readers and a training job, then the real PyTorch job under the
# same kills. `make test` runs the same suite at 30 s (without PyTorch).
.PHONY: chaos
chaos:
	CHAOS_DURATION=120s $(GO) test -run TestChaos -v -count=1 -timeout 10m ./test/chaos/
