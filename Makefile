# outboxd — the two commands a newcomer needs are `make demo` and `make test`.
GO ?= go

.PHONY: demo test vet lint build bench test-bench test-chaos fuzz devdb-stop schema

# The two commands find a Postgres by themselves: DATABASE_URL and
# TEST_DATABASE_URL, or one on 127.0.0.1:5432, or a private cluster that
# scripts/devdb starts in .devdb/ from the installed PostgreSQL.
DEVDB = env=$$(scripts/devdb) || exit 1; eval "$$env";

## demo: run outboxd end to end against Postgres (see DEVDB above)
demo:
	@$(DEVDB) $(GO) run ./cmd/outboxd demo

## test: go vet, then every test with the race detector (TEST_DATABASE_URL).
## Four tests of a package at a time: many wait on paced providers, retry
## schedules or a receiver held on purpose, and two (the cores) left the
## CPU idle while they did.
test: vet
	@$(DEVDB) $(GO) test -race -count=1 -timeout 20m -parallel 4 ./...; status=$$?; $(DEVDB) $(GO) run ./internal/testdb/dropidle; exit $$status

## test-bench: the benchmark end to end at a tiny size (every phase, a short soak, each candidate layout; ~1 min:
## its runs mostly wait on paced traffic, so four run at once)
test-bench:
	@$(DEVDB) OUTBOXD_BENCH_SMOKE=1 $(GO) test -race -count=1 -timeout 15m -parallel 4 -run '^(TestBenchRuns|TestBenchRunsLimitsAndHistory|TestBenchRunsTheIntakeRows|TestSoakRuns|TestEveryCandidateLayoutRuns)$$' ./cmd/outboxbench/

## devdb-stop: stop the private Postgres scripts/devdb may have started
devdb-stop:
	@if [ -f .devdb/data/postmaster.pid ]; then \
		bin=$$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1); \
		if [ "$$(id -u)" = 0 ]; then runuser -u postgres -- $${bin:+$$bin/}pg_ctl -D .devdb/data stop; \
		else $${bin:+$$bin/}pg_ctl -D .devdb/data stop; fi; \
	else echo "no private Postgres running"; fi

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

## lint: gofmt, go.mod/go.sum tidy, staticcheck (pinned here; CI runs it before the tests)
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1; }
	@cd bench && $(GO) mod tidy -diff >/dev/null || { echo "bench/go.mod or go.sum is not tidy: run go mod tidy in bench/"; exit 1; }
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt -w these files:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) run $(STATICCHECK) ./...

## build: binaries into ./bin
build:
	$(GO) build -o bin/ ./cmd/...

## bench: outboxd against Postgres, River and Watermill (bench/, a module of its own), same run (~20 min)
bench:
	$(GO) run ./cmd/outboxbench

## test-chaos: SIGKILL a real outboxd again and again, restart Postgres mid-dispatch
## (each test on a Postgres cluster of its own, started from the installed
## binaries, so the local one is never touched; three tests at a time,
## each mostly waiting on outages and paced providers; their bounds are
## wall clock, so run the suite alone, never beside other tests)
test-chaos:
	$(GO) test -tags chaos -count=1 -timeout 15m -v -parallel 3 -run Chaos ./internal/chaos/

FUZZTIME ?= 100000x
# FUZZTIME counts executions, not seconds: a duration races Go's fuzzing
# coordinator at its deadline on a loaded machine ("context deadline
# exceeded" with no failing input). Minimizing a new input is bounded too.
FUZZMINIMIZE ?= 1s
## fuzz: each fuzz target for FUZZTIME executions, starting from the seed corpus
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzValidatePayload$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./providers/webhook/
	$(GO) test -run '^$$' -fuzz '^FuzzSignVerifyRoundTrip$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./providers/webhook/
	$(GO) test -run '^$$' -fuzz '^FuzzValidatePayload$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./providers/stripe/
	$(GO) test -run '^$$' -fuzz '^FuzzValidatePayload$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./providers/sendgrid/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEvent$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./providers/stripe/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEvent$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./providers/sendgrid/

## schema: write migrations/schema.sql, the schema the migrations make (a test keeps it current)
schema:
	@$(DEVDB) OUTBOXD_WRITE_SCHEMA=1 $(GO) test -count=1 -run '^TestSchemaFileIsCurrent$$' ./migrations/
