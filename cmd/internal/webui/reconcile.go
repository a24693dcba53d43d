package webui

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// "Ask the provider" (outboxctl reconcile): what the provider holds for an
// effect's key, beside the effect, and the action that follows, one click
// away on its own dry-run page.

type reconcileData struct {
	Rec        *outboxtype.Reconciliation
	Suggestion string
	// Next is the page of the suggested action, its reference and reason
	// filled in ("" when it suggests none).
	Next, NextLabel string
	// CannotAsk says why the provider could not be asked.
	CannotAsk string
}

func (u *ui) reconcile(w http.ResponseWriter, r *http.Request) {
	// Asking spends the provider's rate limit and reads with outboxd's
	// key: as the actions, it needs the admin credential.
	_, e := u.onEffect(w, r, u.admin)
	if e == nil {
		return
	}
	d := &reconcileData{}
	asker := u.cfg.Reconcilers[e.Provider]
	if asker == nil && u.op.Profile(e.Provider).Answers == providers.AnswersObjects {
		d.CannotAsk = "this outboxd does not dispatch for " + e.Provider + ", so it holds no key to ask it with: ask from a process that does, or use outboxctl reconcile with the provider's API key"
	}
	rec, err := u.op.Reconcile(r.Context(), e, asker)
	if err != nil {
		u.fail(w, http.StatusBadGateway, "could not ask the provider: "+err.Error(), err)
		return
	}
	d.Rec = rec
	var act oncall.Action
	d.Suggestion, act = oncall.Suggest(rec, u.op.Profile(e.Provider), u.cfg.KeyWindow(e.Provider), oncall.Web, time.Now())
	if d.CannotAsk != "" {
		act = oncall.Action{}
		d.Suggestion = d.CannotAsk
	}
	base := u.cfg.Prefix + "effects/" + e.ID.String() + "/actions/"
	switch act.Act {
	case oncall.ActConfirm:
		q := url.Values{"ref": {act.Ref}, "reason": {fmt.Sprintf("asked %s: %s %s found (%s)", e.Provider, rec.Found[0].Object, act.Ref, rec.Asked)}}
		d.Next, d.NextLabel = base+"confirm?"+q.Encode(), "confirm with reference "+act.Ref+"…"
	case oncall.ActRetry:
		q := url.Values{"reason": {fmt.Sprintf("asked %s: nothing found for the key (%s)", e.Provider, rec.Asked)}}
		d.Next, d.NextLabel = base+"retry?"+q.Encode(), "retry…"
	case oncall.ActRetryForce:
		q := url.Values{"force": {"1"}, "reason": {fmt.Sprintf("asked %s: nothing found for the key, key window passed (%s)", e.Provider, rec.Asked)}}
		d.Next, d.NextLabel = base+"retry?"+q.Encode(), "retry with force…"
	}
	u.render(w, r, http.StatusOK, "reconcile", "Ask the provider about "+e.ID.String(), d)
}
