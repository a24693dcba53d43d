package webui

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
)

// Drift (docs/events.md): provider events that contradict what outboxd
// holds, newest first, and, for admins, recording that they were reviewed.

type driftData struct {
	Records []driftRow
	All     bool
	Reason  string
	Reasons []string
	// Effect narrows the list to one effect's records.
	Effect string
	Error  string
	Done   string
}

type driftRow struct {
	outboxtype.DriftRecord
	// EffectText says what the effect was when the drift was found and
	// what it is now.
	EffectText string
	Object     string
	EventAt    string
}

// driftRowOf is one record as the drift page and the overview show it.
func driftRowOf(r outboxtype.DriftRecord) driftRow {
	row := driftRow{DriftRecord: r, Object: r.Object(), EventAt: r.EventAt()}
	if r.EffectID != nil {
		row.EffectText = fmt.Sprintf("%s; %s when found", r.Kind, r.EffectState)
		if r.EffectStateNow != nil {
			row.EffectText += ", " + *r.EffectStateNow + " now"
			if r.EffectRefNow != nil {
				row.EffectText += " with ref " + *r.EffectRefNow
			}
		}
	}
	return row
}

// driftReasons are the reasons a drift record has (docs/events.md).
var driftReasons = []string{outboxtype.DriftUnknownKey, outboxtype.DriftActedWhileFailed, outboxtype.DriftActedWhileCancelled,
	outboxtype.DriftTwoObjects, outboxtype.DriftUndone, outboxtype.DriftOtherProvider, outboxtype.DriftOtherOperation, outboxtype.DriftOtherObject}

func (u *ui) drift(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &driftData{All: q.Get("all") == "1", Reason: q.Get("reason"), Effect: q.Get("effect")}
	if n := q.Get("acked"); n != "" {
		d.Done = n + " drift record(s) acknowledged: they left this list and the outboxd_drift_unacknowledged gauge; \"show acknowledged too\" lists them with your review."
	}
	u.showDrift(w, r, d, http.StatusOK)
}

func (u *ui) showDrift(w http.ResponseWriter, r *http.Request, d *driftData, status int) {
	d.Reasons = driftReasons
	f := outboxtype.DriftFilter{Limit: 200, Acknowledged: d.All, Reason: d.Reason}
	if d.Reason != "" && !slices.Contains(driftReasons, d.Reason) {
		d.Error = fmt.Sprintf("reason %q: use one of %s", d.Reason, strings.Join(driftReasons, ", "))
		f.Reason, status = "", http.StatusBadRequest
	}
	if d.Effect != "" {
		id, err := uuid.Parse(d.Effect)
		if err != nil {
			u.fail(w, http.StatusBadRequest, "effect: give an effect id", nil)
			return
		}
		f.EffectID = &id
	}
	recs, err := u.op.Drift(r.Context(), f)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read drift", err)
		return
	}
	d.Records = d.Records[:0]
	for _, rec := range recs {
		d.Records = append(d.Records, driftRowOf(rec))
	}
	u.render(w, r, status, "drift", "Drift", d)
}

// ackDrift records that the ticked drift records were reviewed, as
// outboxctl drift ack does; back (an effect id) returns to that effect.
func (u *ui) ackDrift(w http.ResponseWriter, r *http.Request) {
	actor, ok := u.acting(w, r)
	if !ok {
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	back := r.PostFormValue("back")
	var backID uuid.UUID
	if back != "" {
		var err error
		if backID, err = uuid.Parse(back); err != nil {
			u.fail(w, http.StatusBadRequest, "back: not an effect id", nil)
			return
		}
	}
	d := &driftData{Effect: back}
	var ids []int64
	for _, v := range r.PostForm["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			d.Error = fmt.Sprintf("%q is not a drift record id", v)
			break
		}
		ids = append(ids, id)
	}
	switch {
	case d.Error != "":
	case len(ids) == 0:
		d.Error = "tick at least one drift record"
	case len(ids) > maxBulk:
		d.Error = fmt.Sprintf("%d records: at most %d at once", len(ids), maxBulk)
	case reason == "":
		d.Error = "a reason is required: say what you checked or did (confirmed it, undid it at the provider, understood it)"
	}
	if d.Error != "" {
		u.showDrift(w, r, d, http.StatusBadRequest)
		return
	}
	done, err := u.op.AckDrift(r.Context(), ids, actor, reason)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "not done: could not acknowledge", err)
		return
	}
	if len(done) < len(ids) {
		d.Error = fmt.Sprintf("%d of %d acknowledged; the others were acknowledged already or are gone (show acknowledged too lists them)", len(done), len(ids))
		u.showDrift(w, r, d, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web drift ack", "records", len(done), "actor", actor)
	if back != "" {
		http.Redirect(w, r, u.cfg.Prefix+"effects/"+backID.String()+"?acked="+strconv.Itoa(len(done)), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, u.cfg.Prefix+"drift?acked="+strconv.Itoa(len(done)), http.StatusSeeOther)
}
