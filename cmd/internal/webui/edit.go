package webui

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/bundled"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// Edit payload and retry (sideeffects.Operator.EditPayload): for a failed
// effect no provider acted on, a corrected payload with its diff and dry
// run, then the audited change.

type editData struct {
	Effect *outboxtype.Effect
	// Payload is the payload in the form; Diff what it changes.
	Payload  string
	Diff     []string
	DryRun   string
	Applies  bool
	Reason   string
	Reviewed string
	Error    string
}

// validator is the payload check of a provider: the running providers'
// own (outboxd run gives them), else the built-in schemas.
func (u *ui) validator(provider string) providers.Validator {
	if v, ok := u.cfg.Validators[provider]; ok {
		return v
	}
	for _, v := range bundled.Schemas(nil) {
		if v.Name() == provider {
			return v
		}
	}
	return nil
}

func (u *ui) editForm(w http.ResponseWriter, r *http.Request) {
	actor, e := u.onEffect(w, r, u.admin)
	if e == nil {
		return
	}
	d := &editData{Effect: e, Payload: pretty(e.Payload)}
	u.showEdit(w, r, d, actor, http.StatusOK)
}

// showEdit renders the form with the dry run of its payload.
func (u *ui) showEdit(w http.ResponseWriter, r *http.Request, d *editData, actor string, status int) {
	ch, err := u.op.EditPayload(r.Context(), d.Effect.ID, json.RawMessage(d.Payload), u.validator(d.Effect.Provider),
		outboxtype.ActionOpts{Actor: actor, Reason: "(dry run)", DryRun: true})
	switch {
	case err != nil:
		d.DryRun = err.Error()
	case ch.Applied:
		d.DryRun, d.Applies = fmt.Sprintf("The effect would move %s -> pending with this payload and the same key, and be sent again; "+
			"an audit row keeps both payloads, naming you and your reason.", ch.From), true
	default:
		d.DryRun = "Would be refused: " + ch.Skipped
	}
	d.Diff = oncall.PayloadDiff(d.Effect.Payload, json.RawMessage(d.Payload))
	d.Reviewed = effectVersion(d.Effect) + ":" + hashOf(d.Payload)
	u.render(w, r, status, "edit", "Edit payload of "+d.Effect.ID.String(), d)
}

func (u *ui) edit(w http.ResponseWriter, r *http.Request) {
	actor, e := u.onEffect(w, r, u.acting)
	if e == nil {
		return
	}
	d := &editData{Effect: e, Payload: r.PostFormValue("payload"), Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	switch {
	case !json.Valid([]byte(d.Payload)):
		d.Error = "payload: not valid JSON"
	case d.Reason == "":
		d.Error = "a reason is required: say what was wrong and who confirmed the fix, for the audit trail"
	case r.PostFormValue("reviewed") != effectVersion(e)+":"+hashOf(d.Payload):
		// The dry run shown was for another payload, or the effect changed:
		// show this payload's dry run first.
		d.Error = "Not done yet: here is the dry run of this payload; click again to go ahead."
	}
	if d.Error != "" {
		u.showEdit(w, r, d, actor, http.StatusConflict)
		return
	}
	ch, err := u.op.EditPayload(r.Context(), e.ID, json.RawMessage(d.Payload), u.validator(e.Provider), outboxtype.ActionOpts{Actor: actor, Reason: d.Reason})
	if err == nil && !ch.Applied {
		err = fmt.Errorf("%s", cmpOr(ch.Skipped, "not applied"))
	}
	if err != nil {
		d.Error = "not done: " + err.Error()
		u.showEdit(w, r, d, actor, http.StatusConflict)
		return
	}
	u.cfg.Logger.Info("web edit payload", "effect_id", e.ID, "actor", actor)
	http.Redirect(w, r, u.cfg.Prefix+"effects/"+e.ID.String()+"?done=1", http.StatusSeeOther)
}

func pretty(p json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, p, "", "  ") != nil {
		return string(p)
	}
	return b.String()
}

// hashOf names a form's text in its reviewed field.
func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
