package webui

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// The providers' rate limits as every replica shares them, each tenant's
// queue, and, for admins, setting a key's rate (docs/limits.md).

type limitsData struct {
	Limits  []limitRow
	Tenants []tenantRow
	Form    limitForm
	Error   string
	Done    string
	// justSet is the key the link says was just changed, justResumed the
	// key whose hold was lifted ("*" every key's): the note names it only
	// if it is a limit the page lists, never text from a link.
	justSet, justResumed string
	// Holding are the keys paused or with effects waiting, for the form
	// that lifts holds.
	Holding []string
}

type limitRow struct {
	Key, Rate, SetBy, Now, Paused, Waiting string
	Throttles, Granted                     int64
}

type tenantRow struct {
	outboxtype.TenantReport
	Oldest string
}

type limitForm struct {
	Key, Rate, Reason   string
	Resume, InAnySecond bool
}

func (u *ui) limits(w http.ResponseWriter, r *http.Request) {
	d := &limitsData{}
	d.justSet, d.justResumed = r.URL.Query().Get("set"), r.URL.Query().Get("resumed")
	if d.justResumed == "*" {
		d.Done = "Every hold lifted: what waited goes out now, at each key's rate (within about a second). The resumes are in the keys' history (outboxctl limits history)."
	}
	u.showLimits(w, r, d, http.StatusOK)
}

func (u *ui) showLimits(w http.ResponseWriter, r *http.Request, d *limitsData, status int) {
	limits, err := u.op.Limits(r.Context())
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the limits", err)
		return
	}
	tenants, err := u.op.Tenants(r.Context(), 100)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the tenants", err)
		return
	}
	now := time.Now()
	d.Limits, d.Tenants, d.Holding = d.Limits[:0], d.Tenants[:0], d.Holding[:0]
	for _, l := range limits {
		if d.justSet != "" && l.Key == d.justSet {
			d.Done = "Limit " + l.Key + " changed: every replica reads it within a second. The change is in its history (outboxctl limits history)."
		}
		if d.justResumed != "" && l.Key == d.justResumed {
			d.Done = "Limit " + l.Key + " resumed: what waited for it goes out now, at its rate (within about a second). The resume is in its history (outboxctl limits history)."
		}
		if l.Holding(now) {
			d.Holding = append(d.Holding, l.Key)
		}
		row := limitRow{Key: l.Key, Rate: "-", SetBy: "-", Now: "-", Paused: "-", Waiting: "0", Throttles: l.Throttles, Granted: l.Granted}
		if l.Rate != nil {
			row.Rate, row.SetBy = outboxtype.RateText(*l.Rate, l.InAnySecond), l.RateSource
		}
		if l.CurrentRate > 0 {
			row.Now = rate(l.CurrentRate)
		}
		if l.PausedUntil != nil && l.PausedUntil.After(now) {
			row.Paused = "for " + l.PausedUntil.Sub(now).Round(100*time.Millisecond).String()
		}
		if l.WaitingEffects > 0 && l.WaitingSince != nil {
			row.Waiting = fmt.Sprintf("%d, longest %s", l.WaitingEffects, now.Sub(*l.WaitingSince).Round(time.Second))
			provider, _, _ := strings.Cut(l.Key, ":")
			if closes := l.KeyWindowCloses(u.cfg.KeyWindow(provider)); !closes.IsZero() {
				row.Waiting += "; a key window closes in " + closes.Sub(now).Round(time.Minute).String()
				if closes.Sub(now) < time.Hour {
					row.Waiting += " (WARNING: raise the rate, or check the provider)"
				}
			}
		}
		d.Limits = append(d.Limits, row)
	}
	for _, t := range tenants {
		row := tenantRow{TenantReport: t, Oldest: "-"}
		if t.OldestQueued != nil {
			row.Oldest = now.Sub(*t.OldestQueued).Round(time.Second).String()
		}
		d.Tenants = append(d.Tenants, row)
	}
	u.render(w, r, status, "limits", "Limits", d)
}

// rate is a rate for people: a tenth of a unit from 1/s up, three
// significant digits below (a replay's pace of 0.01/s is not "0/s").
func rate(r float64) string { return outboxtype.RateText(r, false) }

// setLimit sets a key's rate from the form, as outboxctl limits set does.
func (u *ui) setLimit(w http.ResponseWriter, r *http.Request) {
	actor, ok := u.acting(w, r)
	if !ok {
		return
	}
	f := limitForm{Key: strings.TrimSpace(r.PostFormValue("key")), Rate: strings.TrimSpace(r.PostFormValue("rate")),
		Reason: strings.TrimSpace(r.PostFormValue("reason")), Resume: r.PostFormValue("resume") == "1",
		InAnySecond: r.PostFormValue("in_any_second") == "1"}
	d := &limitsData{Form: f}
	name, rest, found := strings.Cut(f.Key, ":")
	var to *float64
	switch {
	case !found || name == "" || rest == "" || strings.ContainsAny(f.Key, " \t\n"):
		d.Error = fmt.Sprintf("%q: a limit key is <provider>:<what it limits>, as the table lists them (e.g. webhook:api.partner.example)", f.Key)
	case f.Reason == "":
		d.Error = "a reason is required: say why the rate changes"
	case f.Rate != "none":
		v, err := strconv.ParseFloat(strings.TrimSuffix(f.Rate, "/s"), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			d.Error = fmt.Sprintf("rate %q: give requests a second (e.g. 50), or none", f.Rate)
		}
		to = &v
	}
	if d.Error != "" {
		u.showLimits(w, r, d, http.StatusBadRequest)
		return
	}
	if _, err := u.op.SetLimit(r.Context(), f.Key, to, f.InAnySecond, actor, f.Reason, f.Resume); err != nil {
		d.Error = "not changed: " + err.Error()
		u.showLimits(w, r, d, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web limit set", "key", f.Key, "rate", f.Rate, "in_any_second", f.InAnySecond, "resume", f.Resume, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"limits?set="+url.QueryEscape(f.Key), http.StatusSeeOther)
}

// resumeLimits lifts the hold of one key, or of every key that holds
// something, as outboxctl limits resume does.
func (u *ui) resumeLimits(w http.ResponseWriter, r *http.Request) {
	actor, ok := u.acting(w, r)
	if !ok {
		return
	}
	key, reason := strings.TrimSpace(r.PostFormValue("key")), strings.TrimSpace(r.PostFormValue("reason"))
	d := &limitsData{}
	limits, err := u.op.Limits(r.Context())
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the limits", err)
		return
	}
	var keys []string
	now := time.Now()
	for _, l := range limits {
		if key == "*" && l.Holding(now) || l.Key == key {
			keys = append(keys, l.Key)
		}
	}
	switch {
	case reason == "":
		d.Error = "a reason is required: say why the hold is lifted"
	case key == "":
		d.Error = "choose a key to resume, or every key"
	case key != "*" && len(keys) == 0:
		d.Error = fmt.Sprintf("%q is no limit key the table lists", key)
	case len(keys) == 0:
		d.Error = "no key is paused or has effects waiting"
	}
	if d.Error != "" {
		u.showLimits(w, r, d, http.StatusBadRequest)
		return
	}
	woken, err := u.op.ResumeLimits(r.Context(), keys, actor, reason)
	if err != nil {
		d.Error = "not resumed: " + err.Error()
		u.showLimits(w, r, d, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web limits resumed", "keys", keys, "woken", woken, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"limits?resumed="+url.QueryEscape(key), http.StatusSeeOther)
}
