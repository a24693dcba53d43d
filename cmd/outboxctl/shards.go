package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/envflag"
)

// fleet holds the shards outboxctl may read and act on
// (--shard-database), and which of them a command addresses.
type fleet struct {
	Databases []string
	Schemas   map[string]string
	Shard     string
	All       bool

	shards []cli.Shard
}

func (f *fleet) bind(pf *pflag.FlagSet) {
	cli.BindShards(pf, &f.Databases, &f.Schemas, "as outboxd run takes them; then --shard NAME addresses one, --all-shards reads them all")
	pf.StringVar(&f.Shard, "shard", "", "the --shard-database shard this command reads or acts on")
	envflag.Bind(pf, "shard", "OUTBOXCTL_SHARD")
	pf.BoolVar(&f.All, "all-shards", false, "read every --shard-database shard: one table (or JSON array) with a shard column, in one order (stuck, list, stats, limits, tenants, dispatchers, drift, keys list)")
	envflag.Bind(pf, "all-shards", "OUTBOXCTL_ALL_SHARDS")
}

// selectShard points a at the shard the command addresses, or checks
// that cmd may read every shard; it does nothing without --shard-database.
func (a *app) selectShard(cmd *cobra.Command) error {
	f := &a.fleet
	if len(f.Databases) == 0 {
		if f.Shard != "" || f.All {
			return cli.Usagef("--shard and --all-shards choose among the shards of --shard-database (OUTBOXD_SHARD_DATABASES): name them there, name=postgres://…")
		}
		return nil
	}
	shards, err := cli.ParseShards(f.Databases, f.Schemas, a.Schema)
	if err != nil {
		return err
	}
	f.shards = shards
	// With several shards and no --limits-database-url, the first shard
	// keeps the limits for all, as outboxd run keeps them: reading or
	// setting a key through another shard reads or sets that one row.
	if len(shards) > 1 && a.LimitsURL == "" {
		a.LimitsURL, a.LimitsSchema = shards[0].URL, shards[0].Schema
	}
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = s.Name
	}
	switch {
	case f.Shard != "" && f.All:
		return cli.Usagef("--shard %s and --all-shards: give one of them", f.Shard)
	case f.Shard != "":
		i := slices.IndexFunc(shards, func(s cli.Shard) bool { return s.Name == f.Shard })
		if i < 0 {
			return cli.Usagef("--shard %q: no such shard in --shard-database; the shards are %s", f.Shard, strings.Join(names, ", "))
		}
		a.URL, a.Schema = shards[i].URL, shards[i].Schema
		return nil
	case f.All:
		if _, ok := fleetViews[fleetPath(cmd)]; !ok && !fleetActions[fleetPath(cmd)] {
			return cli.Usagef("--all-shards reads (stuck, list, stats, limits, tenants, dispatchers, drift, keys list): `outboxctl %s` addresses one shard: name it with --shard (one of %s)",
				fleetPath(cmd), strings.Join(names, ", "))
		}
		return nil
	case cmd.Name() == "help" || cmd.Name() == "completion":
		return nil
	}
	return cli.Usagef("--shard-database names %d shards (%s): address one with --shard NAME, or read them all with --all-shards", len(shards), strings.Join(names, ", "))
}

// fleetPath is cmd's path below outboxctl ("keys list").
func fleetPath(cmd *cobra.Command) string {
	_, p, _ := strings.Cut(cmd.CommandPath(), " ")
	return p
}

// fleetView is how --all-shards shows a reading command: each shard's
// rows (its JSON array's objects, or its one object) with a shard field,
// merged in the order of one field, and the table's columns.
type fleetView struct {
	orderBy string
	desc    bool
	columns []fleetColumn
	// row, when set, makes a table row of an object (stats' counts).
	row func(map[string]any) map[string]any
}

// fleetColumn is a table column: its header, the field it shows and
// whether that is a time shown as an age.
type fleetColumn struct {
	header, field string
	age           bool
}

func cols(spec ...string) []fleetColumn {
	out := make([]fleetColumn, 0, len(spec))
	for _, s := range spec {
		header, field, _ := strings.Cut(s, "=")
		field, age := strings.CutSuffix(field, "~age")
		out = append(out, fleetColumn{header: header, field: field, age: age})
	}
	return out
}

// fleetActions are the actions --all-shards may address: those on what
// every shard shares (the limits' place), each shard's part done in turn.
var fleetActions = map[string]bool{"limits resume": true}

var fleetViews = map[string]fleetView{
	"stuck": {orderBy: "updated_at", columns: cols("ID=id", "KIND=kind", "PROVIDER=provider", "STATE=state", "ATTEMPTS=attempts",
		"UNCHANGED=updated_at~age", "WHY=diagnosis")},
	"list": {orderBy: "created_at", desc: true, columns: cols("ID=id", "KIND=kind", "PROVIDER=provider", "STATE=state", "ATTEMPTS=attempts",
		"CREATED=created_at~age", "LAST ERROR=last_error")},
	"stats": {orderBy: "shard", columns: cols("PENDING=pending", "FIRED=fired", "FAILED=failed", "CONFIRMED IN WINDOW=confirmed_in_window",
		"P50 S=confirm_latency_p50_seconds", "P99 S=confirm_latency_p99_seconds", "OLDEST PENDING=oldest_pending_created_at~age"),
		row: statsRow},
	"limits": {orderBy: "key", columns: cols("KEY=key", "RATE=rate", "NOW=current_rate", "PAUSED UNTIL=paused_until", "429S=throttles",
		"WAITING=waiting_effects", "WAITING SINCE=waiting_since~age")},
	"tenants": {orderBy: "oldest_queued", columns: cols("PROVIDER=provider", "TENANT=tenant", "QUEUED=queued", "SCHEDULED=scheduled",
		"IN FLIGHT=in_flight", "OLDEST QUEUED=oldest_queued~age")},
	"dispatchers": {orderBy: "seen_at", desc: true, columns: cols("ID=id", "STATE=state", "STARTED=started_at~age",
		"LAST SEEN=seen_at~age", "RUNNING JOBS=running_jobs")},
	"drift": {orderBy: "created_at", desc: true, columns: cols("ID=id", "REASON=reason", "PROVIDER=provider", "KIND=kind",
		"EFFECT=effect_id", "CREATED=created_at~age", "CHECK=check")},
	"keys list": {orderBy: "created_at", desc: true, columns: cols("ID=id", "STATE=state", "STATUS=status", "SCOPE=scope",
		"METHOD=method", "ROUTE=route", "KEY=key", "CREATED=created_at~age")},
}

// statsRow sums a shard's stats counts by state.
func statsRow(o map[string]any) map[string]any {
	out := maps(o)
	counts, _ := o["counts"].([]any)
	for _, state := range []string{"pending", "fired", "failed"} {
		var n int64
		for _, c := range counts {
			if m, ok := c.(map[string]any); ok && m["state"] == state {
				if v, ok := m["count"].(json.Number); ok {
					x, _ := v.Int64()
					n += x
				}
			}
		}
		out[state] = n
	}
	return out
}

func maps(o map[string]any) map[string]any {
	out := make(map[string]any, len(o)+3)
	for k, v := range o {
		out[k] = v
	}
	return out
}

// fleetRead wraps a reading command so that, with --all-shards, it runs
// against each shard in turn (as --json) and prints one merged answer. A
// shard that cannot be read is named on stderr and the command fails
// after printing the others.
func (a *app) fleetRead(runE func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if !a.fleet.All {
			return runE(cmd, args)
		}
		view := fleetViews[fleetPath(cmd)]
		if cmd.Flags().Lookup("by-cause") != nil && cmd.Flags().Changed("by-cause") {
			return cli.Usagef("--by-cause groups one shard's effects: name it with --shard")
		}
		out, asJSON := cmd.OutOrStdout(), a.JSON
		defer func() { a.JSON = asJSON; cmd.SetOut(out) }()
		a.JSON = true
		var rows []map[string]any
		var failed []string
		for _, s := range a.fleet.shards {
			a.URL, a.Schema = s.URL, s.Schema
			a.close()
			var buf bytes.Buffer
			cmd.SetOut(&buf)
			err := runE(cmd, args)
			if err == nil {
				var got []map[string]any
				got, err = fleetRows(buf.Bytes())
				for _, r := range got {
					r["shard"] = s.Name
					if view.row != nil {
						r = view.row(r)
					}
					rows = append(rows, r)
				}
			}
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "shard %s: %v\n", s.Name, err)
				failed = append(failed, s.Name)
			}
		}
		a.close()
		slices.SortStableFunc(rows, func(x, y map[string]any) int {
			c := compareValues(x[view.orderBy], y[view.orderBy])
			if view.desc {
				c = -c
			}
			return c
		})
		if asJSON {
			if rows == nil {
				rows = []map[string]any{}
			}
			if err := printJSON(out, rows); err != nil {
				return err
			}
		} else if err := printFleetTable(out, view, rows); err != nil {
			return err
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of %d shards could not be read (%s): the others are shown", len(failed), len(a.fleet.shards), strings.Join(failed, ", "))
		}
		return nil
	}
}

// fleetRows reads a command's JSON answer: an array of objects, or one.
func fleetRows(b []byte) ([]map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	switch v := v.(type) {
	case []any:
		out := make([]map[string]any, 0, len(v))
		for _, e := range v {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out, nil
	case map[string]any:
		return []map[string]any{v}, nil
	}
	return nil, nil
}

// compareValues orders two JSON values: times as times, numbers as
// numbers, the rest as text; a missing value last.
func compareValues(x, y any) int {
	switch {
	case x == nil && y == nil:
		return 0
	case x == nil:
		return 1
	case y == nil:
		return -1
	}
	xs, ys := fmt.Sprint(x), fmt.Sprint(y)
	if xt, err := time.Parse(time.RFC3339Nano, xs); err == nil {
		if yt, err := time.Parse(time.RFC3339Nano, ys); err == nil {
			return xt.Compare(yt)
		}
	}
	if xn, ok := x.(json.Number); ok {
		if yn, ok := y.(json.Number); ok {
			xf, _ := xn.Float64()
			yf, _ := yn.Float64()
			return cmp.Compare(xf, yf)
		}
	}
	return strings.Compare(xs, ys)
}

// printFleetTable prints rows under view's columns, the shard first.
func printFleetTable(w interface{ Write([]byte) (int, error) }, view fleetView, rows []map[string]any) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "nothing to show in any shard")
		return err
	}
	tw := table(w)
	headers := []string{"SHARD"}
	for _, c := range view.columns {
		headers = append(headers, c.header)
	}
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, r := range rows {
		cells := []string{fmt.Sprint(r["shard"])}
		for _, c := range view.columns {
			v := r[c.field]
			switch {
			case v == nil:
				cells = append(cells, "")
			case c.age:
				if t, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v)); err == nil {
					if t.IsZero() {
						cells = append(cells, "")
					} else {
						cells = append(cells, ago(t))
					}
					continue
				}
				cells = append(cells, fmt.Sprint(v))
			default:
				s := strings.ReplaceAll(fmt.Sprint(v), "\t", " ")
				cells = append(cells, s)
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// close closes the database a command opened, so that the next shard's
// is opened afresh.
func (a *app) close() {
	for _, p := range []*pgxpool.Pool{a.pool, a.limitsPool} {
		if p != nil {
			p.Close()
		}
	}
	a.pool, a.limitsPool, a.op, a.windows = nil, nil, nil, nil
}

// openShard points a at shard s and opens it, closing what was open.
func (a *app) openShard(ctx context.Context, s cli.Shard) error {
	a.URL, a.Schema = s.URL, s.Schema
	a.close()
	return a.open(ctx)
}

// enableFleet lets the reading commands of fleetViews read every shard.
func (a *app) enableFleet(root *cobra.Command) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if _, ok := fleetViews[fleetPath(c)]; ok && c.RunE != nil {
			c.RunE = a.fleetRead(c.RunE)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
