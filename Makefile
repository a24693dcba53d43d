# outboxd — the two commands a newcomer needs are `make demo` and `make test`.
GO ?= go

.PHONY: demo test vet build bench

## demo: run outboxd end to end against the local Postgres (DATABASE_URL)
demo:
	$(GO) run ./cmd/outboxd demo

## test: go vet, then every test with the race detector (TEST_DATABASE_URL)
test: vet
	$(GO) test -race -count=1 -timeout 20m ./...

vet:
	$(GO) vet ./...

## build: binaries into ./bin
build:
	$(GO) build -o bin/ ./cmd/...

## bench: outboxd against River and Postgres baselines, same run (~3 min)
bench:
	$(GO) run ./cmd/outboxbench
