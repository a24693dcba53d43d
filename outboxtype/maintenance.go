package outboxtype

// PurgeResult counts what a purge deleted (or would delete).
type PurgeResult struct {
	Effects int64 `json:"effects"`
	Events  int64 `json:"events"`
}
