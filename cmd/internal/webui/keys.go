package webui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outbox/idempotency"
)

// Idempotency-Keys (outboxctl keys): the keys the Idempotency-Key
// middleware stored, stuck ones first, and, for admins, releasing a stuck
// key or completing it with the response its request gave.

type keysData struct {
	Keys       []keyRow
	State, Key string
	States     []string
	Error      string
}

type keyRow struct {
	*idempotency.Key
	Route, Status, Lock, Expires string
	// Stuck is an in_progress key whose lock deadline passed: its request
	// died between the handler's commit and storing the response.
	Stuck bool
}

func keyRowOf(k *idempotency.Key, now time.Time) keyRow {
	row := keyRow{Key: k, Route: k.Method + " " + k.Route, Status: "-", Lock: "-", Expires: "never"}
	if strings.HasPrefix(k.Route, k.Method+" ") {
		row.Route = k.Route
	}
	if k.Status != nil {
		row.Status = "HTTP " + strconv.Itoa(*k.Status)
	}
	if k.LockedUntil != nil && k.State == "in_progress" {
		if d := k.LockedUntil.Sub(now); d > 0 {
			row.Lock = "for " + d.Round(time.Second).String() + ": its request may still be running"
		} else {
			row.Lock = "passed " + (-d).Round(time.Second).String() + " ago: its request ended without storing a response"
			row.Stuck = true
		}
	}
	if k.ExpiresAt != nil {
		if d := k.ExpiresAt.Sub(now); d > 0 {
			row.Expires = "in " + d.Round(time.Second).String()
		} else {
			row.Expires = "expired " + (-d).Round(time.Second).String() + " ago"
		}
	}
	return row
}

func (u *ui) keysPage(w http.ResponseWriter, r *http.Request) {
	if u.cfg.Keys == nil {
		u.fail(w, http.StatusNotFound, "this web view was started without the Idempotency-Key store", nil)
		return
	}
	q := r.URL.Query()
	d := &keysData{State: q.Get("state"), Key: strings.TrimSpace(q.Get("key")), States: idempotency.States()}
	if !q.Has("state") {
		d.State = "in_progress"
	}
	status := http.StatusOK
	list, err := u.cfg.Keys.List(r.Context(), idempotency.Filter{State: d.State, Key: d.Key, Limit: 100})
	if err != nil {
		d.Error, status = err.Error(), http.StatusBadRequest
	}
	now := time.Now()
	for _, k := range list {
		d.Keys = append(d.Keys, keyRowOf(k, now))
	}
	u.render(w, r, status, "keys", "Idempotency-Keys", d)
}

// stuckKeys counts in_progress keys whose lock deadline passed (among the
// newest 100 in progress), for the overview.
func (u *ui) stuckKeys(r *http.Request) (int, error) {
	if u.cfg.Keys == nil {
		return 0, nil
	}
	list, err := u.cfg.Keys.List(r.Context(), idempotency.Filter{State: "in_progress", Limit: 100})
	if err != nil {
		return 0, err
	}
	n, now := 0, time.Now()
	for _, k := range list {
		if keyRowOf(k, now).Stuck {
			n++
		}
	}
	return n, nil
}

type keyData struct {
	Row   keyRow
	Audit []idempotency.AuditEntry
	Form  keyForm
	// Plan is the dry run of the completion form, shown before it is done.
	Plan        string
	Error, Done string
}

type keyForm struct {
	Status, Body, Headers, Reason, RenewFor string
	Force                                   bool
}

func (u *ui) keyPage(w http.ResponseWriter, r *http.Request) {
	d := &keyData{}
	switch r.URL.Query().Get("done") {
	case "release":
		d.Done = "Released: the key is failed now, and the client's next request with it runs the handler again."
	case "complete":
		d.Done = "Completed: the client's retries with this key receive the recorded response; the handler does not run again."
	}
	u.showKey(w, r, d, http.StatusOK)
}

func (u *ui) showKey(w http.ResponseWriter, r *http.Request, d *keyData, status int) {
	if u.cfg.Keys == nil {
		u.fail(w, http.StatusNotFound, "this web view was started without the Idempotency-Key store", nil)
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		u.fail(w, http.StatusBadRequest, "not a key id: find keys on the Idempotency-Keys page", nil)
		return
	}
	k, audit, err := u.cfg.Keys.Get(r.Context(), id)
	if errors.Is(err, idempotency.ErrNotFound) {
		u.fail(w, http.StatusNotFound, err.Error(), nil)
		return
	}
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the key", err)
		return
	}
	d.Row, d.Audit = keyRowOf(k, time.Now()), audit
	if d.Form.Status == "" {
		d.Form.Status = "200"
	}
	u.render(w, r, status, "key", "Idempotency-Key "+k.ID.String(), d)
}

// keyActing authenticates a posted key action and reads its key id; it
// answers the request itself when it returns false.
func (u *ui) keyActing(w http.ResponseWriter, r *http.Request) (actor string, id uuid.UUID, ok bool) {
	if actor, ok = u.acting(w, r); !ok {
		return "", id, false
	}
	if u.cfg.Keys == nil {
		u.fail(w, http.StatusNotFound, "this web view was started without the Idempotency-Key store", nil)
		return "", id, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		u.fail(w, http.StatusBadRequest, "not a key id", nil)
		return "", id, false
	}
	return actor, id, true
}

func (u *ui) releaseKey(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := u.keyActing(w, r)
	if !ok {
		return
	}
	o := idempotency.ReleaseOpts{Actor: actor, Reason: strings.TrimSpace(r.PostFormValue("reason")), Force: r.PostFormValue("force") == "1"}
	if _, err := u.cfg.Keys.Release(r.Context(), id, o); err != nil {
		u.showKey(w, r, &keyData{Error: "not released: " + webWords(err)}, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web key release", "key_id", id, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"keys/"+id.String()+"?done=release", http.StatusSeeOther)
}

func (u *ui) completeKey(w http.ResponseWriter, r *http.Request) {
	actor, id, ok := u.keyActing(w, r)
	if !ok {
		return
	}
	f := keyForm{Status: strings.TrimSpace(r.PostFormValue("status")), Body: r.PostFormValue("body"), Headers: r.PostFormValue("headers"),
		Reason: strings.TrimSpace(r.PostFormValue("reason")), RenewFor: strings.TrimSpace(r.PostFormValue("renew_for")), Force: r.PostFormValue("force") == "1"}
	d := &keyData{Form: f}
	o := idempotency.CompleteOpts{Actor: actor, Reason: f.Reason, Force: f.Force, Body: []byte(f.Body), Headers: http.Header{}}
	var err error
	if o.Status, err = strconv.Atoi(f.Status); err != nil {
		d.Error = fmt.Sprintf("status %q: the HTTP status the request answered, e.g. 201", f.Status)
	}
	if f.RenewFor != "" && d.Error == "" {
		if o.RenewFor, err = time.ParseDuration(f.RenewFor); err != nil {
			d.Error = fmt.Sprintf("keep for %q: a duration such as 24h", f.RenewFor)
		}
	}
	for _, line := range strings.Split(strings.ReplaceAll(f.Headers, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" || d.Error != "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "" {
			d.Error = fmt.Sprintf("header %q: write one per line as Name: value", line)
			continue
		}
		o.Headers.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if o.Headers.Get("Content-Type") == "" && len(o.Body) > 0 && json.Valid(o.Body) {
		o.Headers.Set("Content-Type", "application/json")
	}
	if d.Error == "" && r.PostFormValue("confirmed") != "1" {
		// The first click shows what would be recorded; the second does it.
		d.Plan = fmt.Sprintf("Would record HTTP %d with a body of %d bytes (%s) for the client's retries with this key to receive; "+
			"the handler would not run again. Check that the request really succeeded, then click again.", o.Status, len(o.Body), cmpOr(o.Headers.Get("Content-Type"), "no content type"))
		u.showKey(w, r, d, http.StatusOK)
		return
	}
	if d.Error == "" {
		if _, err := u.cfg.Keys.Complete(r.Context(), id, o); err != nil {
			d.Error = "not completed: " + webWords(err)
		}
	}
	if d.Error != "" {
		u.showKey(w, r, d, http.StatusBadRequest)
		return
	}
	u.cfg.Logger.Info("web key complete", "key_id", id, "status", o.Status, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"keys/"+id.String()+"?done=complete", http.StatusSeeOther)
}

// keyFields are the key store's options (idempotency.OptionError) as the
// key page's form offers them.
var keyFields = map[string]string{"Reason": "the reason field", "Actor": "sign in with an admin credential", "Force": `tick "force"`, "RenewFor": `"keep for" 24h`}

// webWords says a refusal of the key store with the form's field that
// answers it.
func webWords(err error) string {
	var oe *idempotency.OptionError
	if errors.As(err, &oe) {
		if field, ok := keyFields[oe.Option]; ok {
			return oe.Msg + " (" + field + ")"
		}
	}
	return err.Error()
}
