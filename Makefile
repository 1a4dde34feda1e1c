# Shade: a peer-to-peer cache mesh for deep-learning training data.
#
#   make demo    the main job: a local peer serving Fashion-MNIST to trainers
#   make test    every test (installs what the tests need)
#   make bench   Go benchmarks and the side-by-side comparison with redis-server

GO       ?= go
BIN      := bin
DATA     := .data
FMNIST   := $(DATA)/fashion-mnist
FUZZTIME ?= 10s

.PHONY: all build test test-go fuzz bench bench-socket deps deps-test demo clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Debian packages the tests use; installed only where missing.
deps-test:
	@./.ci/deps.sh redis-server redis-tools dataset-fashion-mnist iproute2 \
		python3-redis python3-numpy python3-pytest python3-msgpack

test: deps-test test-go fuzz

test-go:
	$(GO) test -race -count=1 -timeout 20m ./...

# Each fuzz target runs for FUZZTIME (go test allows one target per run).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseCommands$$' -fuzztime $(FUZZTIME) ./transport/
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./dataset/
	$(GO) test -run '^$$' -fuzz '^FuzzReport$$' -fuzztime $(FUZZTIME) ./sampling/
	$(GO) test -run '^$$' -fuzz '^FuzzStore$$' -fuzztime $(FUZZTIME) ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime $(FUZZTIME) ./transport/peer/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckMsgpack$$' -fuzztime $(FUZZTIME) ./transport/peer/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1s ./store/ ./policy/ ./sampling/

bench-socket: build
	./test/bench/socket_vs_redis.sh

$(FMNIST)/train: | build
	$(BIN)/shadectl dataset import-idx --dst $(FMNIST)

clean:
	rm -rf $(BIN)
