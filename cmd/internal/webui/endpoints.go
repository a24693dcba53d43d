package webui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
)

// Endpoints (docs/endpoints.md, outboxctl endpoints): the registry, one
// endpoint with its deliveries and history, and, for admins, creating,
// editing, disabling, enabling (delivering or dropping what it held),
// rotating its secret and sending it a test event. A secret is shown once,
// on the page that answers its creation or rotation, never stored in a
// URL.

type endpointsData struct {
	Endpoints []endpoint.Endpoint
	Form      endpointForm
	Error     string
	// Created is the endpoint just created and Secret its secret, shown
	// this once.
	Created *endpoint.Endpoint
	Secret  string
	CanSeal bool
}

type endpointForm struct {
	URL, Types, Tenant, Description, Headers string
}

type endpointData struct {
	Endpoint *endpoint.Endpoint
	Open     int
	History  []endpoint.AuditEntry
	Headers  []string
	Error    string
	Done     string
	// Plan is a dry run's outcome.
	Plan    string
	Secret  string
	CanSeal bool
	Form    endpointForm
	Test    string
}

func (u *ui) endpointsOn(w http.ResponseWriter) bool {
	if u.cfg.Endpoints == nil {
		u.fail(w, http.StatusNotFound, "endpoints are not served here: outboxd run serves them with --endpoint-key", nil)
		return false
	}
	return true
}

func (u *ui) endpointsPage(w http.ResponseWriter, r *http.Request) {
	if !u.endpointsOn(w) {
		return
	}
	u.showEndpoints(w, r, &endpointsData{}, http.StatusOK)
}

func (u *ui) showEndpoints(w http.ResponseWriter, r *http.Request, d *endpointsData, status int) {
	eps, err := u.cfg.Endpoints.List(r.Context(), u.cfg.EndpointsDB, endpoint.ListFilter{})
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the endpoints", err)
		return
	}
	d.Endpoints, d.CanSeal = eps, u.cfg.Endpoints.CanSeal()
	if d.Secret != "" {
		// The secret is on this page only: no cache keeps it.
		w.Header().Set("Cache-Control", "no-store")
	}
	u.render(w, r, status, "endpoints", "Endpoints", d)
}

// splitList reads a comma- or newline-separated list.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// headersOf reads "Name: value" lines.
func headersOf(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("header %q: write one per line as Name: value", line)
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	return out, nil
}

func (u *ui) createEndpoint(w http.ResponseWriter, r *http.Request) {
	if !u.endpointsOn(w) {
		return
	}
	actor, ok := u.acting(w, r)
	if !ok {
		return
	}
	f := endpointForm{URL: strings.TrimSpace(r.PostFormValue("url")), Types: r.PostFormValue("types"),
		Tenant: strings.TrimSpace(r.PostFormValue("tenant")), Description: strings.TrimSpace(r.PostFormValue("description")),
		Headers: r.PostFormValue("headers")}
	d := &endpointsData{Form: f}
	headers, err := headersOf(f.Headers)
	if err != nil {
		d.Error = err.Error()
		u.showEndpoints(w, r, d, http.StatusBadRequest)
		return
	}
	ep, secret, err := u.cfg.Endpoints.Create(r.Context(), u.cfg.EndpointsDB, endpoint.Endpoint{URL: f.URL, EventTypes: splitList(f.Types),
		Tenant: f.Tenant, Description: f.Description, Headers: headers}, endpoint.Change{Actor: actor})
	if err != nil {
		d.Error = "not created: " + err.Error()
		u.showEndpoints(w, r, d, http.StatusBadRequest)
		return
	}
	u.cfg.Logger.Info("web endpoint created", "endpoint", ep.ID, "url", ep.URL, "actor", actor)
	d.Form, d.Created, d.Secret = endpointForm{}, ep, secret
	u.showEndpoints(w, r, d, http.StatusCreated)
}

func (u *ui) endpointOf(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	if !u.endpointsOn(w) {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		u.fail(w, http.StatusBadRequest, "not an endpoint id", nil)
		return uuid.Nil, false
	}
	return id, true
}

func (u *ui) endpointPage(w http.ResponseWriter, r *http.Request) {
	id, ok := u.endpointOf(w, r)
	if !ok {
		return
	}
	d := &endpointData{}
	if done := r.URL.Query().Get("done"); done != "" {
		d.Done = doneText[done]
	}
	u.showEndpoint(w, r, id, d, http.StatusOK)
}

// doneText is what a redirect after an action says, by action.
var doneText = map[string]string{
	"edit":    "Changed. A new URL applies to its deliveries not yet sent; new event types to events recorded from now on.",
	"disable": "Disabled: new events skip it; its open deliveries wait, spending no attempt.",
	"enable":  "Enabled: what it held goes out now.",
	"drop":    "Enabled: what it held was cancelled, each audited; new events reach it.",
}

func (u *ui) showEndpoint(w http.ResponseWriter, r *http.Request, id uuid.UUID, d *endpointData, status int) {
	ctx := r.Context()
	ep, err := u.cfg.Endpoints.Get(ctx, u.cfg.EndpointsDB, id)
	if errors.Is(err, endpoint.ErrNotFound) {
		u.fail(w, http.StatusNotFound, "no such endpoint", nil)
		return
	}
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the endpoint", err)
		return
	}
	open, err := u.cfg.Endpoints.Deliveries(ctx, u.cfg.EndpointsDB, id, sideeffects.MaxHeldDeliveries)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read its deliveries", err)
		return
	}
	hist, err := u.cfg.Endpoints.History(ctx, u.cfg.EndpointsDB, id)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read its history", err)
		return
	}
	d.Endpoint, d.Open, d.History, d.CanSeal = ep, len(open), hist, u.cfg.Endpoints.CanSeal()
	d.Headers = d.Headers[:0]
	for name := range ep.Headers {
		d.Headers = append(d.Headers, name)
	}
	if d.Form == (endpointForm{}) {
		d.Form = endpointForm{URL: ep.URL, Types: strings.Join(ep.EventTypes, ", "), Description: ep.Description}
	}
	if d.Secret != "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	u.render(w, r, status, "endpoint", "Endpoint "+ep.ID.String(), d)
}

// endpointAct is one admin action on an endpoint: edit, disable, enable,
// rotate or test; edit, disable and enable take a dry run.
func (u *ui) endpointAct(w http.ResponseWriter, r *http.Request) {
	id, ok := u.endpointOf(w, r)
	if !ok {
		return
	}
	actor, ok := u.acting(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	action := r.PathValue("action")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	dryRun := r.PostFormValue("dry_run") == "1"
	by := endpoint.Change{Actor: actor, Reason: reason}
	reg, db := u.cfg.Endpoints, u.cfg.EndpointsDB
	d := &endpointData{}
	refuse := func(err error) {
		d.Error = "not done: " + err.Error()
		u.showEndpoint(w, r, id, d, http.StatusBadRequest)
	}
	// dry runs a change in a transaction it rolls back.
	dry := func(what string, change func(pgx.Tx) error) {
		err := pgx.BeginFunc(ctx, u.cfg.EndpointsDB, func(tx pgx.Tx) error {
			if err := change(tx); err != nil {
				return err
			}
			return errDryRun
		})
		if !errors.Is(err, errDryRun) {
			refuse(err)
			return
		}
		d.Plan = "Dry run: " + what + ". Nothing changed."
		u.showEndpoint(w, r, id, d, http.StatusOK)
	}
	done := func(what string) {
		u.cfg.Logger.Info("web endpoint "+action, "endpoint", id, "actor", actor)
		http.Redirect(w, r, u.cfg.Prefix+"endpoints/"+id.String()+"?done="+url.QueryEscape(what), http.StatusSeeOther)
	}
	switch action {
	case "edit":
		d.Form = endpointForm{URL: strings.TrimSpace(r.PostFormValue("url")), Types: r.PostFormValue("types"),
			Description: strings.TrimSpace(r.PostFormValue("description"))}
		up := endpoint.Update{URL: &d.Form.URL, Description: &d.Form.Description, EventTypes: splitList(d.Form.Types)}
		if dryRun {
			dry("it would POST to "+d.Form.URL+" the events "+strings.Join(up.EventTypes, ", "), func(tx pgx.Tx) error {
				_, err := reg.Edit(ctx, tx, id, up, by)
				return err
			})
			return
		}
		if _, err := reg.Edit(ctx, db, id, up, by); err != nil {
			refuse(err)
			return
		}
		done("edit")
	case "disable":
		if dryRun {
			dry("it would be disabled; its open deliveries would wait", func(tx pgx.Tx) error { return reg.Disable(ctx, tx, id, by) })
			return
		}
		if err := reg.Disable(ctx, db, id, by); err != nil {
			refuse(err)
			return
		}
		done("disable")
	case "enable":
		drop := r.PostFormValue("held") == "drop"
		if dryRun {
			held, err := reg.Deliveries(ctx, db, id, sideeffects.MaxHeldDeliveries)
			if err != nil {
				refuse(err)
				return
			}
			verb := "delivered at once"
			if drop {
				verb = "cancelled"
			}
			dry(fmt.Sprintf("it would be enabled; its %d held deliveries %s", len(held), verb), func(tx pgx.Tx) error { return reg.Enable(ctx, tx, id, by) })
			return
		}
		if strings.TrimSpace(reason) == "" {
			refuse(errors.New("a reason is required"))
			return
		}
		if _, err := u.op.EnableEndpoint(ctx, reg, id, drop, actor, reason); err != nil {
			refuse(err)
			return
		}
		if drop {
			done("drop")
			return
		}
		done("enable")
	case "rotate":
		retire := r.PostFormValue("retire_old") != ""
		overlap, err := time.ParseDuration(strings.TrimSpace(r.PostFormValue("overlap")))
		switch {
		case retire:
			overlap = endpoint.RetireAtOnce
		case err != nil || overlap <= 0:
			refuse(errors.New("overlap: give how long the old secret keeps signing, e.g. 24h"))
			return
		}
		secret, err := reg.Rotate(ctx, db, id, overlap, by)
		if err != nil {
			refuse(err)
			return
		}
		u.cfg.Logger.Info("web endpoint rotate", "endpoint", id, "actor", actor, "retire_old", retire)
		d.Secret = secret
		if retire {
			d.Done = "New signing secret, shown this once: every earlier secret stopped signing now; requests carry only the new one's signature."
		} else {
			d.Done = fmt.Sprintf("New signing secret, shown this once: requests carry signatures by both secrets until %s, then only the new one.",
				time.Now().Add(overlap).UTC().Format("2006-01-02 15:04 MST"))
		}
		u.showEndpoint(w, r, id, d, http.StatusOK)
	case "test":
		effect, err := reg.SendTest(ctx, db, id, by)
		if err != nil {
			refuse(err)
			return
		}
		u.cfg.Logger.Info("web endpoint test", "endpoint", id, "actor", actor)
		d.Test = effect.String()
		d.Done = "Test event recorded: its delivery is sent as any other."
		u.showEndpoint(w, r, id, d, http.StatusOK)
	default:
		u.fail(w, http.StatusNotFound, "no such action", nil)
	}
}

var errDryRun = errors.New("dry run")
