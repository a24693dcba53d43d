package webui

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects"
)

// Paced replays (docs/replays.md): the list, one replay with its skips and
// pace changes, and, for admins, starting one (a dry run first), changing
// a running one's pace and cancelling one.

type replaysData struct {
	Replays []replayRow
	Form    replayForm
	// Plan is the dry run of the form, when one was asked for.
	Plan     string
	Reviewed string
	Error    string
	Done     string
	// justStarted is the replay the link says was just started: the note
	// names it only if it is a replay the page lists.
	justStarted string
}

type replayForm struct {
	FailedSince    string
	Kind           string
	Provider       string
	Host           string
	Tenant         string
	Pace           string
	Reason         string
	AllowDuplicate bool
}

type replayRow struct {
	outboxtype.Replay
	StateText string
	Selects   string
	Pace      string
	Left      int
	EndsIn    string
}

func rowOf(r outboxtype.Replay) replayRow {
	row := replayRow{Replay: r, StateText: r.State, Selects: r.Selects(), Pace: rate(r.Spec.Pace), Left: r.Left()}
	switch {
	case r.State != outboxtype.ReplayRunning:
	case r.Job == 0:
		row.StateText = "running, no job: outboxctl replays resume " + strconv.FormatInt(r.ID, 10)
	case r.LastError != "":
		row.StateText = "running, last step failed"
	}
	if r.State == outboxtype.ReplayRunning && row.Left > 0 {
		row.EndsIn = (time.Duration(float64(row.Left) / r.Spec.Pace * float64(time.Second))).Round(time.Second).String()
	}
	return row
}

func (u *ui) replays(w http.ResponseWriter, r *http.Request) {
	d := &replaysData{Form: replayForm{FailedSince: "2h", Pace: "10"}}
	d.justStarted = r.URL.Query().Get("started")
	u.showReplays(w, r, d, http.StatusOK)
}

func (u *ui) showReplays(w http.ResponseWriter, r *http.Request, d *replaysData, status int) {
	list, err := u.op.Replays(r.Context(), 50)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the replays", err)
		return
	}
	d.Replays = d.Replays[:0]
	for _, x := range list {
		if id := strconv.FormatInt(x.ID, 10); d.justStarted == id {
			d.Done = "Replay " + id + " started: outboxd retries its effects in the background. Its row below shows how far it has come."
		}
		d.Replays = append(d.Replays, rowOf(x))
	}
	u.render(w, r, status, "replays", "Replays", d)
}

// spec reads the form into a replay, or says what is wrong with it.
func (f replayForm) spec(now time.Time) (outboxtype.ReplaySpec, error) {
	var spec outboxtype.ReplaySpec
	since := strings.TrimSpace(f.FailedSince)
	if d, err := time.ParseDuration(since); err == nil && d > 0 {
		spec.FailedSince = now.Add(-d)
	} else if t, err := time.Parse(time.RFC3339, since); err == nil {
		spec.FailedSince = t
	} else {
		return spec, fmt.Errorf("failed since %q: give a duration (2h, 90m) or a time in RFC 3339 (2026-11-26T02:00:00Z)", f.FailedSince)
	}
	pace, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f.Pace), "/s"), 64)
	if err != nil {
		return spec, fmt.Errorf("pace %q: give effects a second, e.g. 20", f.Pace)
	}
	spec.Pace, spec.Kind, spec.Provider, spec.Host = pace, strings.TrimSpace(f.Kind), strings.TrimSpace(f.Provider), strings.TrimSpace(f.Host)
	spec.Tenant = strings.TrimSpace(f.Tenant)
	spec.AllowDuplicate = f.AllowDuplicate
	return spec, sideeffects.CheckReplaySpec(spec)
}

// key names what a dry run was made for: the form's fields (the selection
// is counted again when the replay starts).
func (f replayForm) key() string {
	sum := sha256.Sum256([]byte(strings.Join([]string{f.FailedSince, f.Kind, f.Provider, f.Host, f.Tenant, f.Pace, strconv.FormatBool(f.AllowDuplicate)}, "\x00")))
	return hex.EncodeToString(sum[:8])
}

// startReplay starts a replay from the form: a browser's first click shows
// the dry run; the click on its button starts it (scripts, which post no
// "reviewed" field, start it at once, as outboxctl does).
func (u *ui) startReplay(w http.ResponseWriter, r *http.Request) {
	actor, ok := u.acting(w, r)
	if !ok {
		return
	}
	f := replayForm{FailedSince: r.PostFormValue("failed_since"), Kind: r.PostFormValue("kind"), Provider: r.PostFormValue("provider"),
		Host: r.PostFormValue("host"), Tenant: r.PostFormValue("tenant"), Pace: r.PostFormValue("pace"), Reason: strings.TrimSpace(r.PostFormValue("reason")),
		AllowDuplicate: r.PostFormValue("allow_duplicate") == "1"}
	d := &replaysData{Form: f}
	spec, err := f.spec(time.Now())
	if err == nil && f.Reason == "" {
		err = errors.New("a reason is required: it is recorded in the audit trail of every effect the replay retries")
	}
	if err != nil {
		d.Error = err.Error()
		u.showReplays(w, r, d, http.StatusBadRequest)
		return
	}
	opts := outboxtype.ActionOpts{Actor: actor, Reason: f.Reason}
	if reviewed, ok := r.PostForm["reviewed"]; ok && reviewed[0] != f.key() {
		dry := opts
		dry.DryRun = true
		plan, err := u.op.StartReplay(r.Context(), spec, dry)
		if err != nil {
			u.fail(w, http.StatusInternalServerError, "could not count the replay's effects", err)
			return
		}
		took := time.Duration(float64(plan.Selected) / spec.Pace * float64(time.Second)).Round(time.Second)
		d.Plan = fmt.Sprintf("Would replay %d failed effects (%s; acknowledged failures are not replayed) at %s: about %s. "+
			"Each is retried with every refusal of retry; skipped effects are listed with the reason. Nothing is started yet.",
			plan.Selected, plan.Selects(), rate(spec.Pace), took)
		d.Reviewed = f.key()
		u.showReplays(w, r, d, http.StatusOK)
		return
	}
	rp, err := u.op.StartReplay(r.Context(), spec, opts)
	if err != nil {
		d.Error = "not started: " + err.Error()
		u.showReplays(w, r, d, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web replay started", "replay", rp.ID, "selected", rp.Selected, "pace", spec.Pace, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"replays/"+strconv.FormatInt(rp.ID, 10)+"?started=1", http.StatusSeeOther)
}

type replayData struct {
	Row   replayRow
	Skips []outboxtype.ReplaySkip
	Paces []paceRow
	Done  string
	Error string
}

// paceRow is one change of a replay's pace, in words.
type paceRow struct {
	outboxtype.ReplayPace
	To, From string
}

func (u *ui) replayID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		u.fail(w, http.StatusBadRequest, "not a replay id: give the number the replays page lists", nil)
		return 0, false
	}
	return id, true
}

func (u *ui) replay(w http.ResponseWriter, r *http.Request) {
	id, ok := u.replayID(w, r)
	if !ok {
		return
	}
	d := &replayData{}
	switch {
	case r.URL.Query().Get("started") != "":
		d.Done = "Started: outboxd retries its effects in the background, at its pace. Reload to follow it."
	case r.URL.Query().Get("cancelled") != "":
		d.Done = "Cancelled: what it retried stays retried; what it had not looked at stays failed."
	case r.URL.Query().Get("paced") != "":
		d.Done = "Pace changed: the replay's next step takes it."
	}
	u.showReplay(w, r, id, d, http.StatusOK)
}

func (u *ui) showReplay(w http.ResponseWriter, r *http.Request, id int64, d *replayData, status int) {
	rp, err := u.op.Replay(r.Context(), id)
	if errors.Is(err, sideeffects.ErrReplayNotFound) {
		u.fail(w, http.StatusNotFound, fmt.Sprintf("no replay %d", id), nil)
		return
	}
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the replay", err)
		return
	}
	if d.Skips, err = u.op.ReplaySkips(r.Context(), id, 200); err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the replay's skips", err)
		return
	}
	paces, err := u.op.ReplayPaces(r.Context(), id)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the replay's paces", err)
		return
	}
	for _, p := range paces {
		d.Paces = append(d.Paces, paceRow{ReplayPace: p, To: rate(p.Pace), From: rate(p.Previous)})
	}
	d.Row = rowOf(rp)
	u.render(w, r, status, "replay", "Replay "+strconv.FormatInt(id, 10), d)
}

// replayAction reads what an action on a replay needs: the acting admin,
// the replay's id, and a reason (refused without one).
func (u *ui) replayAction(w http.ResponseWriter, r *http.Request) (actor string, id int64, reason string, ok bool) {
	if actor, ok = u.acting(w, r); !ok {
		return "", 0, "", false
	}
	if id, ok = u.replayID(w, r); !ok {
		return "", 0, "", false
	}
	reason = strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		u.showReplay(w, r, id, &replayData{Error: "a reason is required: it is recorded with the replay"}, http.StatusBadRequest)
		return "", 0, "", false
	}
	return actor, id, reason, true
}

func (u *ui) cancelReplay(w http.ResponseWriter, r *http.Request) {
	actor, id, reason, ok := u.replayAction(w, r)
	if !ok {
		return
	}
	done, err := u.op.CancelReplay(r.Context(), id, actor, reason)
	if errors.Is(err, sideeffects.ErrReplayNotFound) {
		u.fail(w, http.StatusNotFound, fmt.Sprintf("no replay %d", id), nil)
		return
	}
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not cancel the replay", err)
		return
	}
	if !done {
		u.showReplay(w, r, id, &replayData{Error: "not cancelled: the replay is not running"}, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web replay cancelled", "replay", id, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"replays/"+strconv.FormatInt(id, 10)+"?cancelled=1", http.StatusSeeOther)
}

func (u *ui) setReplayPace(w http.ResponseWriter, r *http.Request) {
	actor, id, reason, ok := u.replayAction(w, r)
	if !ok {
		return
	}
	pace, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(r.PostFormValue("pace")), "/s"), 64)
	if err != nil {
		err = errors.New("give effects a second, e.g. 20")
	} else {
		err = sideeffects.CheckReplayPace(pace)
	}
	if err != nil {
		u.showReplay(w, r, id, &replayData{Error: fmt.Sprintf("pace %q: %v", r.PostFormValue("pace"), err)}, http.StatusBadRequest)
		return
	}
	previous, done, err := u.op.SetReplayPace(r.Context(), id, pace, actor, reason)
	switch {
	case errors.Is(err, sideeffects.ErrReplayNotFound):
		u.fail(w, http.StatusNotFound, fmt.Sprintf("no replay %d", id), nil)
		return
	case err != nil:
		u.fail(w, http.StatusInternalServerError, "could not change the replay's pace", err)
		return
	case !done:
		u.showReplay(w, r, id, &replayData{Error: "not changed: the replay is not running"}, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web replay pace changed", "replay", id, "pace", pace, "previous", previous, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"replays/"+strconv.FormatInt(id, 10)+"?paced=1", http.StatusSeeOther)
}
