package outboxtype

// PurgeResult counts what a purge deleted (or would delete).
type PurgeResult struct {
	Effects int64 `json:"effects"`
	Events  int64 `json:"events"`
	// Drift counts provider drift records older than the cutoff.
	Drift int64 `json:"drift"`
}

// PurgeOptions shape a purge's pace.
type PurgeOptions struct {
	// Batch is how many effects one statement deletes. Default PurgeBatch.
	Batch int
	// Yield pauses after each batch for as long as the batch took, so that
	// a large purge takes at most half of the time (and of the WAL
	// bandwidth) of the traffic it runs beside. The periodic retention
	// job yields; outboxctl purge does not.
	Yield bool
}
