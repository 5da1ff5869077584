# The two commands a new user needs:
#   make run    install what is needed, build, and apply examples/hello.yaml
#   make test   install what is needed and run every test tier, the fuzz
#               targets briefly, and each benchmark once
GO ?= go
BIN := bin/agentsandbox
FUZZTIME ?= 15s

.PHONY: run test build setup test-tools unit fuzz bench-smoke bench clean

run: setup build
	./$(BIN) apply examples/hello.yaml

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/agentsandbox
	CGO_ENABLED=0 $(GO) build -o bin/agentsandbox-guest ./cmd/agentsandbox-guest

setup:
	./scripts/setup.sh

test: setup test-tools unit fuzz bench-smoke

# Tools only the tests need, each built once per machine into
# $(go env GOPATH)/bin (several minutes the first time): cosign checks our
# attestations in the cosign tier; versitygw is the S3 server the shared
# store's tests (tier s3) run on 127.0.0.1.
test-tools:
	./scripts/install-cosign.sh
	./scripts/install-versitygw.sh

unit:
	$(GO) vet ./...
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: run gofmt -w on the files above'; exit 1; }
	$(GO) test -count=1 -timeout 40m ./...
	# deploy/kubernetes/validate is a module of its own (Kubernetes' validation code, kustomize, hcl).
	cd deploy/kubernetes/validate && $(GO) mod download && $(GO) vet ./... && $(GO) test -count=1 ./...

# Each fuzz target runs briefly; go test -fuzz takes one package and one target at a time.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# Benchmarks are run once to prove they work; real figures: make bench.
bench-smoke:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./...

bench:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 2s ./... | tee bench.out

clean:
	rm -rf bin out
