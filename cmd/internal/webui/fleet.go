package webui

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// FleetShard is one shard of a fleet's web view: its name and the
// configuration of its own view (its Operator, Keys and Endpoints read its
// database; the credentials are the fleet's).
type FleetShard struct {
	Name   string
	Config Config
}

// NewFleet returns the web view of several shards: each shard's whole
// view under prefix + "shards/<name>/" (every page and action carries its
// shard, and says so in its header), and at prefix an overview with a row
// per shard. The credentials of the first shard's Config guard the
// overview; every shard is given the same.
func NewFleet(prefix string, shards []FleetShard) (http.Handler, error) {
	if len(shards) == 0 {
		return nil, errors.New("webui: a fleet needs at least one shard")
	}
	if prefix == "" {
		prefix = "/ui/"
	}
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("webui: prefix %q must start and end with /", prefix)
	}
	mux := http.NewServeMux()
	f := &fleet{prefix: prefix}
	for _, s := range shards {
		cfg := s.Config
		cfg.Prefix = prefix + "shards/" + s.Name + "/"
		cfg.Shard, cfg.Fleet = s.Name, prefix
		h, err := New(cfg)
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", s.Name, err)
		}
		mux.Handle(cfg.Prefix, h)
		f.shards = append(f.shards, fleetShard{name: s.Name, href: cfg.Prefix, cfg: cfg})
	}
	// The overview's own page, guarded as every shard's pages are.
	cfg := shards[0].Config
	cfg.Prefix, cfg.Fleet = prefix, prefix
	t, err := template.New("fleet").Funcs(template.FuncMap{
		"age": func(d time.Duration) string { return d.Round(time.Second).String() },
	}).ParseFS(templateFS, "templates/fleet.html")
	if err != nil {
		return nil, fmt.Errorf("webui: template fleet: %w", err)
	}
	f.page = t
	u := &ui{cfg: cfg, pages: map[string]*template.Template{}}
	if u.pages["error"], err = template.New("error").ParseFS(templateFS, "templates/layout.html", "templates/error.html"); err != nil {
		return nil, err
	}
	if u.cfg.Logger == nil {
		u.cfg.Logger = slog.Default()
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	var overview http.Handler = http.HandlerFunc(f.overview)
	if cfg.ReadToken != "" || cfg.ReadNeedsCredential {
		overview = u.readers(overview)
	}
	mux.Handle("GET "+prefix+"{$}", secure(overview))
	mux.Handle("GET "+prefix+"static/", secure(http.StripPrefix(prefix+"static/", http.FileServerFS(static))))
	if prefix != "/" {
		mux.Handle("GET /{$}", http.RedirectHandler(prefix, http.StatusFound))
	}
	return mux, nil
}

type fleet struct {
	prefix string
	shards []fleetShard
	page   *template.Template
}

type fleetShard struct {
	name, href string
	cfg        Config
}

// fleetRow is a shard's line of the overview.
type fleetRow struct {
	Name, Href     string
	Pending, Fired int64
	Failed         int64
	OldestPending  time.Duration
	Stuck          int
	StuckMore      bool
	Drift          int64
	Error          string
}

// fleetStuckCap bounds how many stuck effects a row counts.
const fleetStuckCap = 100

func (f *fleet) overview(w http.ResponseWriter, r *http.Request) {
	rows := make([]fleetRow, len(f.shards))
	var wg sync.WaitGroup
	for i, s := range f.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			rows[i] = s.row(ctx)
		}()
	}
	wg.Wait()
	var b strings.Builder
	if err := f.page.ExecuteTemplate(&b, "fleet", struct {
		Prefix string
		Now    time.Time
		Rows   []fleetRow
	}{f.prefix, time.Now().UTC(), rows}); err != nil {
		http.Error(w, "could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// row reads a shard's counts; a shard that cannot be read says why.
func (s fleetShard) row(ctx context.Context) fleetRow {
	row := fleetRow{Name: s.name, Href: s.href}
	op := s.cfg.Operator
	gauges, err := op.StateGauges(ctx)
	if err == nil {
		for _, g := range gauges {
			switch g.State {
			case outboxtype.StatePending:
				row.Pending += g.Count
				row.OldestPending = max(row.OldestPending, g.OldestAge)
			case outboxtype.StateFired:
				row.Fired += g.Count
			case outboxtype.StateFailed:
				row.Failed += g.Count
			}
		}
		var stuck []outboxtype.StuckEffect
		if stuck, err = op.Stuck(ctx, 5*time.Minute, fleetStuckCap+1); err == nil {
			row.Stuck, row.StuckMore = min(len(stuck), fleetStuckCap), len(stuck) > fleetStuckCap
			row.Drift, err = op.UnacknowledgedDrift(ctx)
		}
	}
	if err != nil {
		row.Error = "could not be read: " + shortError(err)
	}
	return row
}

// shortError is err's text up to its first line break, at most 200
// characters.
func shortError(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	if len(msg) > 200 {
		msg = msg[:199] + "…"
	}
	return msg
}
