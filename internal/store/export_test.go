package store

// SweepStatement is the sweeper's query in s's schema.
func SweepStatement(s *Store) string { return s.sql(sqlSweep) }

// StuckStatement is the stuck list's statement, for plan checks.
func StuckStatement(s *Store) string { return s.sql(sqlStuck) }

// JobInStatement is the lookup of an effect's newest job in some states.
func JobInStatement(s *Store) string { return s.sql(sqlJobIn) }

// FewJobsPlan runs fn with the planner settings of the reads that look up
// a page of effects' jobs.
var FewJobsPlan = fewJobsPlan

// MakeDueStatement makes due jobs available, for plan checks.
func MakeDueStatement(s *Store) string { return s.sql(sqlMakeDue) }
