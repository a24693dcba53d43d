package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// watermill runs the Watermill SQL outbox (bench/watermill, a module of its
// own so that outboxd's go.mod never gains Watermill) as a subprocess in
// the bench schema, built once per run.
type watermill struct {
	bin    string
	url    string
	schema string
}

// watermillResult is what bench/watermill prints.
type watermillResult struct {
	Count     int     `json:"count"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	P50       int64   `json:"p50_ns"`
	P99       int64   `json:"p99_ns"`
}

// buildWatermill builds bench/watermill into dir. The module is found from
// the working directory upwards (make bench runs from the repository root,
// go test from cmd/outboxbench).
func buildWatermill(ctx context.Context, dir, url, schema string) (*watermill, error) {
	mod, err := findUp("bench/go.mod")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "watermill")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./watermill")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the Watermill peer (bench/watermill): %v\n%s", err, out)
	}
	return &watermill{bin: bin, url: url, schema: schema}, nil
}

func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the working directory: run outboxbench from the repository", rel)
		}
		dir = parent
	}
}

func (w *watermill) run(ctx context.Context, args ...string) (watermillResult, error) {
	cmd := exec.CommandContext(ctx, w.bin, append([]string{"-database-url", w.url, "-schema", w.schema}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return watermillResult{}, fmt.Errorf("the Watermill peer %v: %v: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var r watermillResult
	if err := json.Unmarshal(out, &r); err != nil {
		return watermillResult{}, fmt.Errorf("the Watermill peer %v: %w", args, err)
	}
	if r.Count == 0 || r.PerSecond <= 0 {
		return watermillResult{}, errors.New("Watermill peer reported nothing: " + string(out))
	}
	return r, nil
}

// publish runs order transactions publishing three messages, as outboxd's
// enqueue-cost run does with three effects.
func (w *watermill) publish(ctx context.Context, conc int, d time.Duration) (enqueueResult, error) {
	r, err := w.run(ctx, "-mode", "publish", "-concurrency", strconv.Itoa(conc), "-duration", d.String())
	if err != nil {
		return enqueueResult{}, err
	}
	return enqueueResult{Name: "domain tx + Watermill SQL publisher (3 messages, forwarder envelope)", Concurrency: conc,
		Txs: r.Count, TPS: r.PerSecond, P50: time.Duration(r.P50), P99: time.Duration(r.P99)}, nil
}

// forward burns down n messages through Watermill's forwarder to a
// publisher that only counts.
func (w *watermill) forward(ctx context.Context, n int) (dispatchResult, error) {
	fmt.Fprintf(os.Stderr, "  Watermill forwarder: %d ...\n", n)
	r, err := w.run(ctx, "-mode", "forward", "-messages", strconv.Itoa(n))
	if err != nil {
		return dispatchResult{}, err
	}
	return dispatchResult{Name: "Watermill SQL forwarder, no-op publisher", N: r.Count, Seconds: r.Seconds, PerSecond: r.PerSecond}, nil
}
