# edihub: "make run" starts the local stack, "make test" runs every test.
GO ?= go

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)

# BORING=1 builds edihub with Go's BoringCrypto module (GOEXPERIMENT=boringcrypto:
# RSA, AES, SHA-2 and randomness from BoringSSL through cgo; needs gcc, and for
# the image's static binary the C library's static archive). RSA-2048 private-key
# operations, two per received message, are about 1.5x faster with it on x86-64
# (docs/performance.md). Linux amd64 and arm64 only.
BORING ?=
ifeq ($(BORING),1)
BUILD_ENV = GOEXPERIMENT=boringcrypto CGO_ENABLED=1
IMAGE_ENV = GOEXPERIMENT=boringcrypto CGO_ENABLED=1
IMAGE_FLAGS = -tags netgo,osusergo
IMAGE_LDFLAGS = -linkmode external -extldflags -static
else
BUILD_ENV =
IMAGE_ENV = CGO_ENABLED=0
IMAGE_FLAGS =
IMAGE_LDFLAGS =
endif

.PHONY: run test build image vet fmt controlplane bench clean failover-report chaos

## run: start PostgreSQL, a kube-apiserver (unless EDIHUB_LEADER_BACKEND=postgres), Mailpit, three replicas and their logs (Ctrl-C stops all)
run: build
	@scripts/deps.sh
	@if [ "$${EDIHUB_LEADER_BACKEND:-kubernetes}" = kubernetes ]; then scripts/controlplane-build.sh; fi
	@scripts/mailpit-build.sh || echo "make run: Mailpit not built (see above); the stack runs without a mail catcher"
	./bin/edihub-localstack

## test: vet, unit + integration tests (race), short fuzzing, summary
test:
	@scripts/test.sh

## build: build bin/edihub and the local-stack runner (BORING=1: edihub with BoringCrypto)
build:
	$(BUILD_ENV) $(GO) build -o bin/edihub ./cmd/edihub
	$(GO) build -o bin/edihub-localstack ./test/localstack

## image: build the container image without Docker: OCI layout in bin/image, docker-loadable bin/edihub-image.tar (static binary, CA certificates, non-root user, empty base; BORING=1: with BoringCrypto)
image:
	$(IMAGE_ENV) $(GO) build -trimpath $(IMAGE_FLAGS) -ldflags "-s -w -X main.buildVersion=$(VERSION) $(IMAGE_LDFLAGS)" -o bin/edihub-static ./cmd/edihub
	$(GO) run ./cmd/edihub-image -binary bin/edihub-static -version $(VERSION) -revision "$(REVISION)" -out bin/image -tar bin/edihub-image.tar

## controlplane: build kube-apiserver and etcd for the Kubernetes tests
controlplane:
	@scripts/controlplane-build.sh

## bench: one summary table (figure, value, reference from the same run, ratio, target, result), printed and written with the machine and its load to docs/bench.md, of: receive throughput vs the RSA bound, the built edihub serve under test/loadgen (msg/s vs the RSA bound, edihub CPU vs its RSA CPU, PostgreSQL CPU and statements per message; a BoringCrypto build beside it; 1-3 replicas on one database), the inbound save's PostgreSQL backend CPU alone, purge rate of 1,000,000 rows and receive p99 during it, console query p50/p95 on 1,000,000 messages, peak RSS for a 200 MB payload, a 2 GiB compressed+signed+encrypted message (peak RSS above idle, throughput vs openssl decrypt+verify of the same file), the same size sent compressed+signed+encrypted and signed+encrypted (peak RSS above idle, throughput vs openssl cms -sign | cms -encrypt of the same file, with gzip -1 before them for the compressed send)
bench:
	$(GO) run ./test/bench -page docs/bench.md

## failover-report: measure failover against real replicas, kube-apiserver and PostgreSQL (>= 10 trials each, both backends, about 10 minutes) and print the tables with their targets
failover-report:
	@scripts/deps.sh
	@scripts/controlplane-build.sh
	$(GO) run ./test/failover/cmd/report

## chaos: the whole hub (three replicas, PostgreSQL primary + synchronous standby, kube-apiserver, a partner station) under load both ways and a seeded schedule of faults, then the checkers' counts and the failover table; short mode by default (a few minutes), CHAOS_FLAGS="-long -duration 30m -seed 7" for the long one, -async to see what asynchronous replication loses
chaos:
	@scripts/deps.sh
	@scripts/controlplane-build.sh
	$(GO) run ./test/chaos/cmd/chaos -page docs/chaos.md $(CHAOS_FLAGS)

vet:
	$(GO) vet ./...

fmt:
	gofmt -w cmd internal test

## clean: remove built binaries (keeps .local state and the control plane)
clean:
	rm -rf bin
