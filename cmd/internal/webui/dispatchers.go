package webui

import (
	"fmt"
	"net/http"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// Dispatchers (outboxctl dispatchers): the outboxd processes that ran
// against this schema, what each holds and held back, and its settings.

type dispatchersData struct {
	Rows []dispatcherRow
	// Left says, per process that is not running, the dispatch jobs it
	// left running and what becomes of them.
	Left []string
}

type dispatcherRow struct {
	outboxtype.DispatcherRecord
	State       string
	RunningJobs int
	HeldBack    []string
}

func (u *ui) dispatchers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ds, err := u.op.Dispatchers(ctx, 50)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the dispatchers", err)
		return
	}
	running, err := u.op.RunningJobs(ctx)
	if err != nil {
		u.fail(w, http.StatusInternalServerError, "could not read the running jobs", err)
		return
	}
	now := time.Now()
	held := make(map[string]outboxtype.RunningJobs, len(running))
	for _, j := range running {
		held[j.HeldBy] = j
	}
	d := &dispatchersData{}
	for _, rec := range ds {
		row := dispatcherRow{DispatcherRecord: rec, State: oncall.HolderState(rec, now), RunningJobs: held[rec.ID].Jobs}
		if oncall.Alive(rec, now) {
			for _, dest := range rec.Destinations {
				if text := oncall.DestinationText(dest, now); text != "" {
					row.HeldBack = append(row.HeldBack, oncall.DestinationName(dest)+": "+text)
				}
			}
		} else if row.RunningJobs > 0 {
			d.Left = append(d.Left, fmt.Sprintf("%s (%s) left %d dispatch job(s) running, the oldest attempted %s ago: River rescues them once they have run "+
				"for its --rescue-after, and their effects are re-fired with the same key (at_least_once) or parked for review (at_most_once). "+
				"The overview's stuck list names each.", rec.ID, row.State, row.RunningJobs, now.Sub(held[rec.ID].Oldest).Round(time.Second)))
		}
		delete(held, rec.ID)
		d.Rows = append(d.Rows, row)
	}
	for holder, j := range held {
		d.Rows = append(d.Rows, dispatcherRow{DispatcherRecord: outboxtype.DispatcherRecord{ID: holder, SeenAt: j.Oldest}, State: "not recorded", RunningJobs: j.Jobs})
	}
	u.render(w, r, http.StatusOK, "dispatchers", "Dispatchers", d)
}
