package webui

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

type overviewData struct {
	Now           time.Time
	Gauges        []outboxtype.StateGauge
	Stuck         []stuckRow
	Reasons       []outboxtype.ReasonCount
	Chart         template.HTML
	ConfirmedHour int64
	FailedHour    int64
	// Recent are the newest effects, whatever their state: what was just
	// enqueued, even when nothing is stuck.
	Recent []*outboxtype.Effect
	// Incidents are the stuck effects grouped by cause, newest first.
	Incidents []outboxtype.StuckGroup
	// FailedTotal counts failures not acknowledged; Reasons group the
	// newest ReasonsOf of them.
	FailedTotal, ReasonsOf int64
	// HeldBack are the webhook destinations a running outboxd's gate holds
	// back (breaker open, at its cap, not answering): the first thing to
	// know when a partner stops answering.
	HeldBack []oncall.HeldDestination
	// Drift is the newest drift records nobody reviewed, of DriftCount.
	Drift      []driftRow
	DriftCount int64
	// StuckKeys counts Idempotency-Keys in progress whose lock passed.
	StuckKeys int
	// NeedsYou says what asks for a person, one item each; empty when
	// nothing does.
	NeedsYou []needsYou
}

// needsYou is one line of the overview's "needs you": how many, of what,
// and where to go.
type needsYou struct {
	Text, Href string
}

// overviewDrift is how many of the unreviewed drift records the overview
// lists; the drift page has them all.
const overviewDrift = 5

// reasonsOf is how many of the newest failures the failure reasons group:
// enough to name every cause of an incident, and a read that stays the
// same however many failures history keeps.
const reasonsOf = 1000

type stuckRow struct {
	outboxtype.StuckEffect
	Diagnosis string
}

func (u *ui) overview(w http.ResponseWriter, r *http.Request) {
	ctx, now := r.Context(), time.Now()
	d := overviewData{Now: now.UTC(), ReasonsOf: reasonsOf}
	var err error
	if d.Gauges, err = u.op.StateGauges(ctx); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the counts", err)
		return
	}
	if d.Incidents, err = u.op.StuckGroups(ctx, time.Minute, 20); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read stuck effects", err)
		return
	}
	stuck, err := u.op.Stuck(ctx, 5*time.Minute, 50)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read stuck effects", err)
		return
	}
	sit, err := u.situation(r, now)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the dispatchers", err)
		return
	}
	d.HeldBack = sit.HeldBack
	if d.DriftCount, err = u.op.UnacknowledgedDrift(ctx); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read drift", err)
		return
	}
	if d.DriftCount > 0 {
		recs, err := u.op.Drift(ctx, outboxtype.DriftFilter{Limit: overviewDrift})
		if err != nil {
			u.fail(w, http.StatusInternalServerError, "could not read drift", err)
			return
		}
		for _, rec := range recs {
			d.Drift = append(d.Drift, driftRowOf(rec))
		}
	}
	for _, s := range oncall.ChainsUnderHeads(stuck) {
		sit.KeyWindow = u.cfg.KeyWindow(s.Provider)
		d.Stuck = append(d.Stuck, stuckRow{s, oncall.Explain(s, sit)})
	}
	for _, g := range d.Gauges {
		if g.State == outboxtype.StateFailed {
			d.FailedTotal += g.Count
		}
	}
	if d.Reasons, err = u.op.FailureReasons(ctx, 20, reasonsOf); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read failure reasons", err)
		return
	}
	start := now.Truncate(time.Minute).Add(-59 * time.Minute)
	minutes, err := u.minutes.hour(ctx, start, now)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read throughput", err)
		return
	}
	for _, m := range minutes {
		d.ConfirmedHour += m.Confirmed
		d.FailedHour += m.Failed
	}
	d.Chart = chart(start, minutes)
	if d.StuckKeys, err = u.stuckKeys(r); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the Idempotency-Keys", err)
		return
	}
	if d.NeedsYou, err = u.needsYou(ctx, &d, now); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read what needs you", err)
		return
	}
	if d.Recent, err = u.op.List(ctx, outboxtype.Filter{Limit: 10}); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read recent effects", err)
		return
	}
	u.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// needsYou lists what asks for a person on the overview, the most urgent
// first (oncall.Needs), each linked to where it is dealt with.
func (u *ui) needsYou(ctx context.Context, d *overviewData, now time.Time) ([]needsYou, error) {
	n := oncall.Needs{HeldBack: len(d.HeldBack), Incidents: len(d.Incidents), Drift: d.DriftCount, StuckKeys: d.StuckKeys}
	for _, g := range d.Incidents {
		n.StuckEffects += g.Count
	}
	if u.cfg.Endpoints != nil {
		eps, err := u.cfg.Endpoints.List(ctx, u.cfg.EndpointsDB, endpoint.ListFilter{})
		if err != nil {
			return nil, err
		}
		for _, ep := range eps {
			n.AddEndpoint(ep.DisabledAt, ep.FailingSince)
		}
	}
	limits, err := u.op.Limits(ctx)
	if err != nil {
		return nil, err
	}
	n.AddLimits(limits, now)
	href := map[oncall.Place]string{
		oncall.PlaceHeldBack:  "#heldback",
		oncall.PlaceEndpoints: u.cfg.Prefix + "endpoints",
		oncall.PlaceIncidents: "#incidents",
		oncall.PlaceLimits:    u.cfg.Prefix + "limits",
		oncall.PlaceDrift:     u.cfg.Prefix + "drift",
		oncall.PlaceKeys:      u.cfg.Prefix + "keys?state=in_progress",
	}
	var out []needsYou
	for _, line := range n.Lines(now) {
		text := line.Text
		if line.Place == oncall.PlaceIncidents {
			text += ", by cause below"
		}
		out = append(out, needsYou{text, href[line.Place]})
	}
	return out, nil
}

// chart draws confirmed (green) and failed (red) effects per minute over
// 60 minutes as inline SVG. Only numbers go into it.
func chart(start time.Time, minutes []outboxtype.MinuteCount) template.HTML {
	const width, height, slots = 600.0, 140.0, 60
	var c, f [slots]int64
	var top int64 = 1
	for _, m := range minutes {
		i := int(m.Minute.Sub(start) / time.Minute)
		if i < 0 || i >= slots {
			continue
		}
		c[i], f[i] = m.Confirmed, m.Failed
		top = max(top, m.Confirmed+m.Failed)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="chart" viewBox="0 0 %d %d" role="img" aria-label="confirmed and failed per minute">`, int(width), int(height+14))
	bar := width / slots
	for i := range slots {
		hc := float64(c[i]) / float64(top) * height
		hf := float64(f[i]) / float64(top) * height
		x := float64(i) * bar
		if hc > 0 {
			fmt.Fprintf(&b, `<rect class="confirmed" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d confirmed</title></rect>`,
				x, height-hc, bar-1, hc, start.Add(time.Duration(i)*time.Minute).UTC().Format("15:04"), c[i])
		}
		if hf > 0 {
			fmt.Fprintf(&b, `<rect class="failed" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d failed</title></rect>`,
				x, height-hc-hf, bar-1, hf, start.Add(time.Duration(i)*time.Minute).UTC().Format("15:04"), f[i])
		}
		if i%15 == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`, x, int(height+12), start.Add(time.Duration(i)*time.Minute).UTC().Format("15:04"))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="10" text-anchor="end">max %d/min</text></svg>`, int(width-2), top)
	return template.HTML(b.String()) //nolint:gosec // numbers and times only
}

type searchData struct {
	Q, AggType, AggID, Kind, State, Since, Until string
	// IDs is a pasted list: webhook-ids or keys, provider references,
	// effect ids; Missing are those of them no effect has.
	IDs      string
	Missing  []string
	States   []string
	Searched bool
	Error    string
	Effects  []*outboxtype.Effect
	Next     string
	// WhatNow is, for a list of one kind in a live or failed state (an
	// incident's link from the overview), what to do about the newest of
	// them: the words its own page starts with.
	WhatNow string
	WhatOf  *outboxtype.Effect
}

var (
	keyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// prefixRE is the start of a key as outboxctl prints it (12 digits and
	// an ellipsis) or longer.
	prefixRE = regexp.MustCompile(`^[0-9a-f]{12,63}$`)
)

const pageSize = 50

// flashFor is how long after an action its effect's page says what was
// done (after the action's redirect).
const flashFor = 10 * time.Minute

func (u *ui) search(w http.ResponseWriter, r *http.Request) {
	ctx, q := r.Context(), r.URL.Query()
	d := searchData{Q: strings.TrimSpace(q.Get("q")), AggType: q.Get("aggregate_type"), AggID: q.Get("aggregate_id"),
		Kind: q.Get("kind"), State: q.Get("state"), Since: q.Get("since"), Until: q.Get("until"), IDs: q.Get("ids")}
	for _, s := range []outboxtype.State{outboxtype.StatePending, outboxtype.StateFired, outboxtype.StateConfirmed, outboxtype.StateFailed, outboxtype.StateCancelled} {
		d.States = append(d.States, string(s))
	}
	d.Searched = len(q) > 0
	if !d.Searched {
		u.render(w, r, http.StatusOK, "search", "Search", d)
		return
	}
	status := http.StatusOK
	var err error
	switch {
	case strings.TrimSpace(d.IDs) != "":
		d.Effects, d.Missing, err = u.lookupMany(r, d.IDs)
	case d.Q != "":
		d.Effects, err = u.lookup(r, d.Q)
		if err == nil && len(d.Effects) == 0 {
			if c, cErr := u.op.Carried(ctx, d.Q); cErr == nil {
				d.Error = oncall.Carried(*c, time.Now())
			}
		}
	case d.AggType != "" || d.AggID != "":
		if d.AggType == "" || d.AggID == "" {
			err = errors.New("aggregate: give both its type (e.g. order) and its id (e.g. ord_1022)")
			break
		}
		var evs []outboxtype.EventEffects
		if evs, err = u.op.EventsOfAggregate(ctx, d.AggType, d.AggID, pageSize); err != nil {
			break
		}
		for _, ev := range evs {
			effs, e2 := u.op.EffectsOfEvent(ctx, ev.ID)
			if e2 != nil {
				err = e2
				break
			}
			d.Effects = append(d.Effects, effs...)
		}
	default:
		f := outboxtype.Filter{Kind: d.Kind, Limit: pageSize + 1}
		if d.State != "" {
			if !slices.Contains(d.States, d.State) {
				err = fmt.Errorf("state %q: use one of %s", d.State, strings.Join(d.States, ", "))
				break
			}
			f.States = []outboxtype.State{outboxtype.State(d.State)}
		}
		if f.Since, err = parseTime("since", d.Since); err != nil {
			break
		}
		if f.Before, err = parseTime("until", d.Until); err != nil {
			break
		}
		if after := q.Get("after"); after != "" {
			id, perr := uuid.Parse(after)
			if perr != nil {
				err = errors.New("after: the id of the last effect of the previous page")
				break
			}
			if f.After, err = u.op.Get(ctx, id); err != nil {
				break
			}
		}
		if d.Effects, err = u.op.List(ctx, f); err != nil {
			break
		}
		if len(d.Effects) > pageSize {
			d.Effects = d.Effects[:pageSize]
			next := url.Values{}
			for k, v := range q {
				next[k] = v
			}
			next.Set("after", d.Effects[pageSize-1].ID.String())
			d.Next = u.cfg.Prefix + "effects?" + next.Encode()
		}
	}
	if err == nil && d.Kind != "" && len(d.Effects) > 0 && slices.Contains([]string{"pending", "fired", "failed"}, d.State) {
		d.WhatOf = d.Effects[0]
		d.WhatNow, err = u.whatNow(r, d.WhatOf)
	}
	if err != nil {
		d.Error, d.Effects, status = err.Error(), nil, http.StatusBadRequest
		if errors.Is(err, sideeffects.ErrNotFound) {
			d.Error, status = "no effect with that id", http.StatusOK
		}
	}
	u.render(w, r, status, "search", "Search", d)
}

// whatNow is the effect page's first words for e.
func (u *ui) whatNow(r *http.Request, e *outboxtype.Effect) (string, error) {
	jobs, err := u.op.Jobs(r.Context(), e.ID)
	if err != nil {
		return "", err
	}
	audit, err := u.op.Audit(r.Context(), e.ID)
	if err != nil {
		return "", err
	}
	var blocked *uuid.UUID
	if e.OrderingKey != nil {
		if blocked, err = u.op.BlockedBehind(r.Context(), e.ID); err != nil {
			return "", err
		}
	}
	sit, err := u.situation(r, time.Now())
	if err != nil {
		return "", err
	}
	return u.diagnose(e, jobs, audit, blocked, sit), nil
}

// maxPasted bounds the ids one pasted list takes: a page of results.
const maxPasted = pageSize

// lookupMany finds the effects of a pasted list of ids, one per line or
// separated by spaces, commas or semicolons: the webhook-ids a receiver
// logged (an effect's key, any case), provider references, effect ids.
// Each id finds exactly the effects it names, never a kind or a prefix,
// so that ticking all of them and confirming confirms only what was
// pasted; missing lists the ids no effect has.
func (u *ui) lookupMany(r *http.Request, list string) (found []*outboxtype.Effect, missing []string, err error) {
	ctx := r.Context()
	ids := strings.FieldsFunc(list, func(c rune) bool { return c == ',' || c == ';' || c == ' ' || c == '\t' || c == '\n' || c == '\r' })
	if len(ids) > maxPasted {
		return nil, nil, fmt.Errorf("%d ids pasted: at most %d at once (a page of results); paste the rest after acting on these", len(ids), maxPasted)
	}
	seen := map[uuid.UUID]bool{}
	add := func(es ...*outboxtype.Effect) {
		for _, e := range es {
			if !seen[e.ID] {
				seen[e.ID] = true
				found = append(found, e)
			}
		}
	}
	for _, raw := range ids {
		id := strings.Trim(raw, `"'<>()[]`)
		var hit []*outboxtype.Effect
		switch lower := strings.ToLower(id); {
		case keyRE.MatchString(lower):
			e, err := u.op.GetByKey(ctx, lower)
			if err != nil && !errors.Is(err, sideeffects.ErrNotFound) {
				return nil, nil, err
			}
			if e != nil {
				hit = []*outboxtype.Effect{e}
			}
		default:
			if uid, perr := uuid.Parse(id); perr == nil {
				e, err := u.op.Get(ctx, uid)
				if err != nil && !errors.Is(err, sideeffects.ErrNotFound) {
					return nil, nil, err
				}
				if e != nil {
					hit = []*outboxtype.Effect{e}
				}
				break
			}
			if len(id) > 512 {
				return nil, nil, fmt.Errorf("%.40q…: over 512 bytes: paste ids, one per line", id)
			}
			if hit, err = u.op.ByProviderRef(ctx, id, pageSize); err != nil {
				return nil, nil, err
			}
		}
		if len(hit) == 0 {
			missing = append(missing, id)
		}
		add(hit...)
	}
	return found, missing, nil
}

// lookup finds effects by effect id, event id or idempotency key.
func (u *ui) lookup(r *http.Request, q string) ([]*outboxtype.Effect, error) {
	ctx := r.Context()
	// Keys are hex: an uppercase copy, or the 12-digit prefix outboxctl
	// prints (with its ellipsis), finds the same effect.
	if hex := strings.ToLower(strings.TrimRight(q, "…. ")); prefixRE.MatchString(hex) {
		return u.op.ByKeyPrefix(ctx, hex, pageSize)
	} else if keyRE.MatchString(hex) {
		q = hex
	}
	if keyRE.MatchString(q) {
		e, err := u.op.GetByKey(ctx, q)
		if errors.Is(err, sideeffects.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []*outboxtype.Effect{e}, nil
	}
	id, err := uuid.Parse(q)
	if err != nil {
		// Anything else is a provider's reference (pi_…, re_…, a SendGrid
		// message id) or an aggregate's id (an order id), of whatever type.
		if len(q) > 512 {
			return nil, errors.New("search: over 512 bytes: give an effect or event id, an idempotency key or its first 12 digits, a provider reference, or an aggregate id such as an order id")
		}
		byRef, err := u.op.ByProviderRef(ctx, q, pageSize)
		if err != nil || len(byRef) > 0 {
			return byRef, err
		}
		evs, err := u.op.EventsOfAggregate(ctx, "", q, pageSize)
		if err != nil {
			return nil, err
		}
		var out []*outboxtype.Effect
		for _, ev := range evs {
			effs, err := u.op.EffectsOfEvent(ctx, ev.ID)
			if err != nil {
				return nil, err
			}
			out = append(out, effs...)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("search: no effect with the provider reference %q and no event of an aggregate with that id. "+
				"Give an effect or event id, an idempotency key (any case) or its first 12 or more digits, a provider reference "+
				"(pi_…, re_…, a SendGrid message id) as the provider shows it, or an aggregate id (an order id)", q)
		}
		return out, nil
	}
	e, err := u.op.Get(ctx, id)
	if err == nil {
		return []*outboxtype.Effect{e}, nil
	}
	if !errors.Is(err, sideeffects.ErrNotFound) {
		return nil, err
	}
	return u.op.EffectsOfEvent(ctx, id) // an event id, or nothing
}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return t, fmt.Errorf("%s %q: give a time such as 2026-11-23T10:00:00Z, or a duration back from now such as 2h", field, s)
	}
	return t, nil
}

type effectData struct {
	Effect    *outboxtype.Effect
	Columns   [][2]string
	Event     *outboxtype.Event
	Siblings  []*outboxtype.Effect
	Attempts  []outboxtype.Attempt
	Timeline  []oncall.TimelineEntry
	Diagnosis string
	Jobs      []outboxtype.Job
	Audit     []outboxtype.AuditEntry
	Delivery  *outboxtype.Delivery
	Drift     []outboxtype.DriftRecord
	// DriftOpen is whether any of Drift awaits a review.
	DriftOpen bool
	Actions   []string
	Flash     string
	// BlockedBehind is the earlier effect of its ordering key it waits for.
	BlockedBehind *uuid.UUID
}

// onEffect authenticates the request with auth (u.admin for a page that
// needs the credential, u.acting for a post) and loads the effect its path
// names; it answers the request itself when it returns no effect.
func (u *ui) onEffect(w http.ResponseWriter, r *http.Request, auth func(http.ResponseWriter, *http.Request) (string, bool)) (string, *outboxtype.Effect) {
	actor, ok := auth(w, r)
	if !ok {
		return "", nil
	}
	return actor, u.loadEffect(w, r)
}

func (u *ui) loadEffect(w http.ResponseWriter, r *http.Request) *outboxtype.Effect {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		u.fail(w, http.StatusBadRequest, "not an effect id: find effects with Search", nil)
		return nil
	}
	e, err := u.op.Get(r.Context(), id)
	if errors.Is(err, sideeffects.ErrNotFound) {
		if c, cErr := u.op.Carried(r.Context(), id.String()); cErr == nil {
			u.fail(w, http.StatusNotFound, oncall.Carried(*c, time.Now()), nil)
			return nil
		}
		u.fail(w, http.StatusNotFound, "no effect with id "+id.String()+" (never, or purged after retention)", nil)
		return nil
	}
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the effect", err)
		return nil
	}
	return e
}

func (u *ui) effect(w http.ResponseWriter, r *http.Request) {
	e := u.loadEffect(w, r)
	if e == nil {
		return
	}
	ctx := r.Context()
	d := effectData{Effect: e, Actions: actionsFor(e)}
	var err error
	load := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	load(func() (err error) { d.Event, err = u.op.Event(ctx, e.SourceID); return })
	load(func() (err error) { d.Siblings, err = u.op.EffectsOfEvent(ctx, e.SourceID); return })
	load(func() (err error) { d.Attempts, err = u.op.Attempts(ctx, e.ID); return })
	load(func() (err error) { d.Jobs, err = u.op.Jobs(ctx, e.ID); return })
	load(func() (err error) { d.Audit, err = u.op.Audit(ctx, e.ID); return })
	load(func() (err error) { d.Delivery, err = u.op.Delivery(ctx, e.ID); return })
	load(func() (err error) {
		d.Drift, err = u.op.Drift(ctx, outboxtype.DriftFilter{EffectID: &e.ID})
		return
	})
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the effect's history", err)
		return
	}
	// The note an action leaves after its redirect is written from the
	// effect's newest audit entry, never from the link: a crafted link
	// can at most show what was really done last.
	if r.URL.Query().Get("done") != "" && len(d.Audit) > 0 {
		if a := d.Audit[len(d.Audit)-1]; time.Since(a.CreatedAt) < flashFor && a.FromState != "" {
			d.Flash = fmt.Sprintf("%s by %s: %s -> %s", a.Action, a.Actor, a.FromState, a.ToState)
			var details struct {
				Warning string `json:"warning"`
			}
			if json.Unmarshal(a.Details, &details) == nil && details.Warning != "" {
				d.Flash += " (" + details.Warning + ")"
			}
		}
	}
	for _, rec := range d.Drift {
		d.DriftOpen = d.DriftOpen || rec.AcknowledgedAt == nil
	}
	if n := r.URL.Query().Get("acked"); n != "" && d.Flash == "" {
		d.Flash = "drift acknowledged: see the review below"
	}
	d.Timeline = oncall.Timeline(e, d.Attempts, d.Audit, d.Delivery, d.Drift)
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	deref := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	d.Columns = [][2]string{
		{"kind", e.Kind}, {"provider", e.Provider}, {"state", string(e.State)}, {"idempotency key", e.IdempotencyKey},
		{"attempts", fmt.Sprintf("%d since the last redrive, %d in all, %d redrives", e.Attempts, e.TotalAttempts, e.Redrives)},
		{"in doubt", fmt.Sprint(e.InDoubt)}, {"acknowledged", ts(e.AcknowledgedAt)}, {"last error", deref(e.LastError)},
		{"provider ref", deref(e.ProviderRef)}, {"replayed", fmt.Sprint(e.Replayed)}, {"next attempt", ts(e.NextAttemptAt)},
		{"created", ts(&e.CreatedAt)}, {"updated", ts(&e.UpdatedAt)}, {"first fired", ts(e.FirstFiredAt)},
		{"not before", ts(e.NotBefore)}, {"key window from", ts(e.KeyWindowFrom)}, {"fired", ts(e.FiredAt)}, {"confirmed", ts(e.ConfirmedAt)},
		{"payload", string(e.Payload)},
	}
	if e.Tenant != nil {
		d.Columns = append(d.Columns, [2]string{"tenant", *e.Tenant})
	}
	if e.WaitingFor != nil {
		// Waiting for a rate limit is not an attempt (docs/limits.md).
		if tenant, ok := strings.CutPrefix(*e.WaitingFor, "turn:"); ok {
			d.Columns = append(d.Columns, [2]string{"waiting for", fmt.Sprintf("its tenant's turn (tenant %s) since %s (not an attempt)", tenant, ts(e.WaitingSince))})
		} else {
			d.Columns = append(d.Columns, [2]string{"waiting for", fmt.Sprintf("limit %s since %s (not an attempt)", *e.WaitingFor, ts(e.WaitingSince))})
		}
	}
	if e.OrderingKey != nil {
		policy := "block the key if it fails"
		if e.OrderingSkipFailed {
			policy = "the key goes on if it fails"
		}
		d.Columns = append(d.Columns[:len(d.Columns)-1],
			[2]string{"ordering key", fmt.Sprintf("%s (position %d; %s)", *e.OrderingKey, *e.OrderingSeq, policy)},
			[2]string{"released", ts(e.OrderingReleasedAt)},
			d.Columns[len(d.Columns)-1])
		if d.BlockedBehind, err = u.op.BlockedBehind(ctx, e.ID); err != nil {
			u.fail(w, http.StatusInternalServerError, "could not read the effect's ordering key", err)
			return
		}
	}
	sit, err := u.situation(r, time.Now())
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the dispatchers", err)
		return
	}
	d.Diagnosis = u.diagnose(e, d.Jobs, d.Audit, d.BlockedBehind, sit)
	u.render(w, r, http.StatusOK, "effect", "Effect "+e.ID.String(), d)
}

// actionsFor lists the actions an effect's state allows.
// diagnose says, at the top of an effect's page, what its state means
// and what to do (oncall.WhatNow).
func (u *ui) diagnose(e *outboxtype.Effect, jobs []outboxtype.Job, audit []outboxtype.AuditEntry, blocked *uuid.UUID, sit oncall.Situation) string {
	sit.KeyWindow = u.cfg.KeyWindow(e.Provider)
	return oncall.WhatNow(e, jobs, audit, blocked, sit)
}

// situation is what the diagnoses know of the running dispatchers: their
// crash-recovery bound, the processes holding jobs, what their gates hold
// back (oncall.SituationOf).
func (u *ui) situation(r *http.Request, now time.Time) (oncall.Situation, error) {
	ds, err := u.op.Dispatchers(r.Context(), 100)
	if err != nil {
		return oncall.Situation{}, err
	}
	sit := oncall.SituationOf(now, u.cfg.FiredBound, ds)
	sit.Profiles = u.op.Profiles()
	sit.Say = oncall.Web
	return sit, nil
}

func actionsFor(e *outboxtype.Effect) []string {
	var out []string
	switch e.State {
	case outboxtype.StatePending:
		out = []string{"cancel", "confirm", "requeue"}
	case outboxtype.StateFired:
		out = []string{"retry", "cancel", "confirm", "requeue"}
	case outboxtype.StateFailed:
		out = []string{"retry", "cancel", "confirm", "acknowledge"}
	case outboxtype.StateCancelled:
		return []string{"retry", "confirm"}
	default:
		return nil
	}
	if e.OrderingKey != nil && e.OrderingReleasedAt == nil {
		out = append(out, "release")
	}
	return out
}

var actionHelp = map[string]string{
	"retry":       "Back to pending with a new River job and the same key; refused while a call may be in flight, for an at_most_once effect in doubt without allowing a duplicate, and near or past the key window without force.",
	"cancel":      "Never fire it. A call in flight may still reach the provider; its acknowledgement is then kept in the audit trail.",
	"confirm":     "Record that the provider did it, with its reference, after checking the provider.",
	"release":     "Let the effects after it on its ordering key go on, whatever becomes of it; it keeps its state and can still be retried, cancelled or confirmed (a retry may then fire it after them).",
	"requeue":     "Give a pending or fired effect with no live River job a new job (the sweeper would, within --sweep-interval); refused while a job is live for it.",
	"acknowledge": "Keep it failed, reviewed and correct (a card decline, a retired endpoint): out of stuck and the failed-effects alert.",
}

type actionData struct {
	Effect         *outboxtype.Effect
	Action, Help   string
	Reason, Ref    string
	Force          bool
	AllowDuplicate bool
	DryRun         outboxtype.Change
	DryRunText     string
	Error          string
	// Reviewed names what the dry run on the page was made for: the
	// effect's version and the options. A click whose form carries another
	// one (the options were changed, or the effect changed meanwhile) is
	// shown its own dry run instead of being done.
	Reviewed string
	// Review says why the click was shown again instead of done.
	Review string
	// Behind are, for a release, the effects it lets go, in order.
	Behind []*outboxtype.Effect
}

// reviewedShape is what reviewKey makes: anything else was not written by
// the page's own form.
var reviewedShape = regexp.MustCompile(`^[0-9a-f]{16}:force=(true|false):allow_duplicate=(true|false)$`)

// reviewKey names what a dry run was made for: the effect as it was (its
// last change) and the options that change the outcome.
func reviewKey(e *outboxtype.Effect, d *actionData) string {
	return fmt.Sprintf("%s:force=%t:allow_duplicate=%t", effectVersion(e), d.Force, d.AllowDuplicate)
}

// effectVersion changes with every change an action or a worker makes to
// an effect: its state and attempts, and the marks that do not move
// updated_at (acknowledged, released).
func effectVersion(e *outboxtype.Effect) string {
	mark := func(t *time.Time) int64 {
		if t == nil {
			return 0
		}
		return t.UnixMicro()
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%d|%d|%d|%d|%d", e.State, e.UpdatedAt.UnixMicro(), e.TotalAttempts, e.Redrives,
		mark(e.AcknowledgedAt), mark(e.OrderingReleasedAt), mark(e.ConfirmedAt)))
	return hex.EncodeToString(sum[:8])
}

func (u *ui) actionForm(w http.ResponseWriter, r *http.Request) {
	actor, e := u.onEffect(w, r, u.admin)
	if e == nil {
		return
	}
	q := r.URL.Query()
	// A link may fill in the form (Ask the provider's suggestion): what it
	// fills in is shown, and nothing is done before the click.
	d := &actionData{Effect: e, Action: r.PathValue("action"), Force: q.Get("force") == "1",
		AllowDuplicate: q.Get("allow_duplicate") == "1", Ref: truncate(q.Get("ref"), 255), Reason: truncate(q.Get("reason"), 500)}
	u.showAction(w, r, d, actor, http.StatusOK)
}

func (u *ui) showAction(w http.ResponseWriter, r *http.Request, d *actionData, actor string, status int) {
	help, known := actionHelp[d.Action]
	if !known {
		u.fail(w, http.StatusNotFound, "unknown action: retry, cancel, confirm, acknowledge, release or requeue", nil)
		return
	}
	d.Help = help
	d.Reviewed = reviewKey(d.Effect, d)
	if d.Action == "release" && d.Effect.OrderingKey != nil {
		behind, err := u.op.WaitingBehind(r.Context(), d.Effect.ID, pageSize)
		if err != nil {
			u.fail(w, http.StatusInternalServerError, "could not read the effects behind it", err)
			return
		}
		d.Behind = behind
	}
	ch, err := u.perform(r, d, actor, true)
	if err != nil {
		d.DryRunText = err.Error()
	} else {
		d.DryRun, d.DryRunText = ch, describe(ch)
	}
	u.render(w, r, status, "action", d.Action+" "+d.Effect.ID.String(), d)
}

// acting authenticates a posted action and reads its form: a browser's
// post (basic auth, which the browser sends by itself) must also come
// from this origin with its CSRF token; a bearer token's need not.
func (u *ui) acting(w http.ResponseWriter, r *http.Request) (actor string, ok bool) {
	actor, bearer, ok := u.authenticate(w, r)
	if !ok {
		return "", false
	}
	if err := r.ParseForm(); err != nil {
		u.fail(w, http.StatusBadRequest, "unreadable form", nil)
		return "", false
	}
	if !bearer {
		if err := u.sameOrigin(r); err != nil {
			u.fail(w, http.StatusForbidden, "refused: "+err.Error(), nil)
			return "", false
		}
	}
	return actor, true
}

func (u *ui) act(w http.ResponseWriter, r *http.Request) {
	actor, e := u.onEffect(w, r, u.acting)
	if e == nil {
		return
	}
	d := &actionData{Effect: e, Action: r.PathValue("action"), Reason: strings.TrimSpace(r.PostFormValue("reason")),
		Ref: strings.TrimSpace(r.PostFormValue("ref")), Force: r.PostFormValue("force") == "1", AllowDuplicate: r.PostFormValue("allow_duplicate") == "1"}
	if _, known := actionHelp[d.Action]; !known {
		u.fail(w, http.StatusNotFound, "unknown action: retry, cancel, confirm, acknowledge, release or requeue", nil)
		return
	}
	switch {
	case d.Reason == "":
		d.Error = "a reason is required: say why, for the audit trail"
	case d.Action == "confirm" && d.Ref == "" && u.needsRef(e.Provider):
		d.Error = "confirm needs the provider's reference for what it did"
	}
	if d.Error != "" {
		u.showAction(w, r, d, actor, http.StatusBadRequest)
		return
	}
	// The page's own form says what its dry run was made for; a click on
	// anything else is shown its dry run first. (Scripts, which post no
	// such field, act at once, as outboxctl does.)
	if reviewed, ok := r.PostForm["reviewed"]; ok && reviewed[0] != reviewKey(e, d) {
		switch {
		case !reviewedShape.MatchString(reviewed[0]):
			d.Review = "Not done: the form did not say what its dry run was made for (its reviewed field is missing or damaged). " +
				"Below is what the click would do now; click again to go ahead."
		case !strings.HasPrefix(reviewed[0], effectVersion(e)+":"):
			d.Review = fmt.Sprintf("Not done: this effect changed since the page was opened (it is now %s, last changed %s). "+
				"Below is what the click would do now; click again to go ahead.", e.State, e.UpdatedAt.UTC().Format(time.RFC3339))
		default:
			d.Review = "Not done yet: the options changed since the dry run. Below is what this click will do; click again to go ahead."
		}
		u.showAction(w, r, d, actor, http.StatusConflict)
		return
	}
	ch, err := u.perform(r, d, actor, false)
	if err == nil && !ch.Applied {
		err = errors.New(cmpOr(oncall.Refusal(ch, oncall.Web), "not applied"))
	}
	if err != nil {
		d.Error = "not done: " + err.Error()
		u.showAction(w, r, d, actor, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web action", "action", d.Action, "effect_id", e.ID, "actor", actor, "from", ch.From, "to", ch.To)
	http.Redirect(w, r, u.cfg.Prefix+"effects/"+e.ID.String()+"?done=1", http.StatusSeeOther)
}

// perform runs the action through the operator API, as outboxctl does.
func (u *ui) perform(r *http.Request, d *actionData, actor string, dryRun bool) (outboxtype.Change, error) {
	ctx, op := r.Context(), u.cfg.Operator
	opts := outboxtype.ActionOpts{Actor: actor, Reason: cmpOr(d.Reason, "(dry run)"), DryRun: dryRun, Force: d.Force,
		AllowDuplicate: d.AllowDuplicate, Ref: d.Ref}
	ids := []uuid.UUID{d.Effect.ID}
	var chs []outboxtype.Change
	var err error
	switch d.Action {
	case "retry":
		chs, err = op.Retry(ctx, ids, opts)
	case "cancel":
		chs, err = op.Cancel(ctx, ids, opts)
	case "acknowledge":
		chs, err = op.Acknowledge(ctx, ids, opts)
	case "release":
		chs, err = op.Release(ctx, ids, opts)
	case "requeue":
		chs, err = op.Requeue(ctx, ids, opts)
	case "confirm":
		if dryRun && opts.Ref == "" && u.needsRef(d.Effect.Provider) {
			opts.Ref = "(reference)"
		}
		var ch outboxtype.Change
		ch, err = op.Confirm(ctx, d.Effect.ID, opts)
		chs = []outboxtype.Change{ch}
	}
	if err != nil {
		return outboxtype.Change{}, err
	}
	if len(chs) != 1 {
		return outboxtype.Change{}, errors.New("the effect is gone")
	}
	return chs[0], nil
}

func describe(ch outboxtype.Change) string {
	if !ch.Applied {
		return "Would be refused: " + oncall.Refusal(ch, oncall.Web)
	}
	s := fmt.Sprintf("The effect would move %s -> %s, with an audit row naming you and your reason.", ch.From, ch.To)
	if ch.From == ch.To && ch.Effect != nil && ch.Effect.OrderingKey != nil {
		s = fmt.Sprintf("The effects after it on ordering key %q would go on; it stays %s. An audit row names you and your reason.", *ch.Effect.OrderingKey, ch.From)
	}
	if ch.Warning != "" {
		s += " Warning: " + ch.Warning
	}
	return s
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// maxBulk bounds the effects one bulk action takes: a page of results.
const maxBulk = pageSize

type bulkRow struct {
	ID       uuid.UUID
	Kind     string
	From, To string
	Result   string
	Applies  bool
}

type bulkData struct {
	Action, Help, Reason  string
	Force, AllowDuplicate bool
	Rows                  []bulkRow
	Applies               int
	Summary               string
	Reviewed, Review      string
	Error, Done           string
}

// bulkActions are the actions the search page offers on ticked effects.
// Confirm, given no reference, confirms webhooks only (each with the
// webhook-id the receiver saw) and skips the others, which need their own
// reference on their own page, as outboxctl confirm does.
var bulkActions = []string{"retry", "cancel", "confirm", "acknowledge", "release", "requeue"}

// bulkIDs reads the ticked effect ids.
func bulkIDs(vals []string) ([]uuid.UUID, error) {
	if len(vals) == 0 {
		return nil, errors.New("tick at least one effect in the search's results")
	}
	if len(vals) > maxBulk {
		return nil, fmt.Errorf("%d effects: at most %d at once (a page of results)", len(vals), maxBulk)
	}
	ids := make([]uuid.UUID, 0, len(vals))
	seen := map[uuid.UUID]bool{}
	for _, v := range vals {
		id, err := uuid.Parse(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not an effect id", v)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (u *ui) bulkForm(w http.ResponseWriter, r *http.Request) {
	actor, ok := u.admin(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	d := &bulkData{Action: q.Get("action"), Force: q.Get("force") == "1", AllowDuplicate: q.Get("allow_duplicate") == "1"}
	ids, err := bulkIDs(q["id"])
	if err != nil || !slices.Contains(bulkActions, d.Action) {
		if err == nil {
			err = fmt.Errorf("action %q: use %s", d.Action, strings.Join(bulkActions, ", "))
		}
		u.fail(w, http.StatusBadRequest, err.Error(), nil)
		return
	}
	u.showBulk(w, r, d, ids, actor, http.StatusOK)
}

// showBulk renders the dry run of the action on ids, with the key of what
// it was made for.
func (u *ui) showBulk(w http.ResponseWriter, r *http.Request, d *bulkData, ids []uuid.UUID, actor string, status int) {
	d.Help = actionHelp[d.Action]
	chs, err := u.performMany(r, d, ids, actor, true)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not run the dry run", err)
		return
	}
	d.Rows, d.Applies = bulkRows(chs, true)
	d.Summary = fmt.Sprintf("%d of %d would change; the others would be skipped, as listed.", d.Applies, len(d.Rows))
	d.Reviewed = bulkKey(chs, d)
	u.render(w, r, status, "bulk", d.Action+" "+fmt.Sprint(len(ids))+" effects", d)
}

func bulkRows(chs []outboxtype.Change, dryRun bool) ([]bulkRow, int) {
	rows := make([]bulkRow, len(chs))
	n := 0
	for i, c := range chs {
		row := bulkRow{From: string(c.From), To: string(c.To), Applies: c.Applied}
		if c.Effect != nil {
			row.ID, row.Kind = c.Effect.ID, c.Effect.Kind
		}
		switch {
		case !c.Applied:
			row.Result = "skipped: " + oncall.Refusal(c, oncall.Web)
		case dryRun:
			row.Result = "would change"
			n++
		default:
			row.Result = "done"
			n++
		}
		if c.Warning != "" {
			row.Result += " (" + c.Warning + ")"
		}
		rows[i] = row
	}
	return rows, n
}

// bulkKey names what a bulk dry run was made for: each effect's version
// and the options.
func bulkKey(chs []outboxtype.Change, d *bulkData) string {
	var b strings.Builder
	for _, c := range chs {
		if c.Effect != nil {
			fmt.Fprintf(&b, "%s=%s;", c.Effect.ID, effectVersion(c.Effect))
		}
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%s|force=%t|allow_duplicate=%t", d.Action, b.String(), d.Force, d.AllowDuplicate))
	return hex.EncodeToString(sum[:12])
}

func (u *ui) bulkAct(w http.ResponseWriter, r *http.Request) {
	actor, ok := u.acting(w, r)
	if !ok {
		return
	}
	d := &bulkData{Action: r.PostFormValue("action"), Reason: strings.TrimSpace(r.PostFormValue("reason")),
		Force: r.PostFormValue("force") == "1", AllowDuplicate: r.PostFormValue("allow_duplicate") == "1"}
	ids, err := bulkIDs(r.PostForm["id"])
	if err != nil || !slices.Contains(bulkActions, d.Action) {
		if err == nil {
			err = fmt.Errorf("action %q: use %s", d.Action, strings.Join(bulkActions, ", "))
		}
		u.fail(w, http.StatusBadRequest, err.Error(), nil)
		return
	}
	if d.Reason == "" {
		d.Error = "a reason is required: say why, for the audit trail"
		u.showBulk(w, r, d, ids, actor, http.StatusBadRequest)
		return
	}
	// The dry run on the page must be what the click does: the effects
	// as they were, with the options shown.
	if reviewed, ok := r.PostForm["reviewed"]; ok {
		chs, err := u.performMany(r, d, ids, actor, true)
		if err != nil {
			u.fail(w, http.StatusInternalServerError, "could not run the dry run", err)
			return
		}
		if reviewed[0] != bulkKey(chs, d) {
			d.Review = "Not done: the effects or the options changed since the dry run. Below is what this click will do now; click again to go ahead."
			u.showBulk(w, r, d, ids, actor, http.StatusConflict)
			return
		}
	}
	chs, err := u.performMany(r, d, ids, actor, false)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "not done: "+err.Error(), err)
		return
	}
	d.Rows, d.Applies = bulkRows(chs, false)
	d.Done = fmt.Sprintf("%s by %s: %d of %d effects changed", d.Action, actor, d.Applies, len(d.Rows))
	d.Summary = "Each change has its audit row naming you and your reason."
	u.cfg.Logger.Info("web bulk action", "action", d.Action, "effects", len(ids), "changed", d.Applies, "actor", actor)
	u.render(w, r, http.StatusOK, "bulk", d.Action+" done", d)
}

// performMany runs the action on ids through the operator API.
func (u *ui) performMany(r *http.Request, d *bulkData, ids []uuid.UUID, actor string, dryRun bool) ([]outboxtype.Change, error) {
	ctx, op := r.Context(), u.cfg.Operator
	opts := outboxtype.ActionOpts{Actor: actor, Reason: cmpOr(d.Reason, "(dry run)"), DryRun: dryRun, Force: d.Force, AllowDuplicate: d.AllowDuplicate}
	switch d.Action {
	case "retry":
		return op.Retry(ctx, ids, opts)
	case "cancel":
		return op.Cancel(ctx, ids, opts)
	case "acknowledge":
		return op.Acknowledge(ctx, ids, opts)
	case "requeue":
		return op.Requeue(ctx, ids, opts)
	case "confirm":
		chs := make([]outboxtype.Change, 0, len(ids))
		for _, id := range ids {
			ch, err := op.Confirm(ctx, id, opts)
			if err != nil {
				return nil, err
			}
			chs = append(chs, ch)
		}
		return chs, nil
	default:
		return op.Release(ctx, ids, opts)
	}
}

// needsRef says a confirmation of provider's effects takes the provider's
// reference (its profile; a provider without one takes it too).
func (u *ui) needsRef(provider string) bool { return u.op.Profile(provider).Refs }
