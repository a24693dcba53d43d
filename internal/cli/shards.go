package cli

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/migrations"
)

// BindShards binds --shard-database (OUTBOXD_SHARD_DATABASES) and
// --shard-schema (OUTBOXD_SHARD_SCHEMAS), the shards both binaries take;
// what says what they are for with each binary.
func BindShards(fs *pflag.FlagSet, databases *[]string, schemas *map[string]string, what string) {
	fs.StringArrayVar(databases, "shard-database", nil, "the application's shards, name=postgres://… (repeat the flag; in the variable separate entries by spaces): "+what)
	envflag.Bind(fs, "shard-database", "OUTBOXD_SHARD_DATABASES")
	envflag.Secret(fs, "shard-database")
	fs.StringToStringVar(schemas, "shard-schema", nil, "schemas of the --shard-database shards where not --schema, e.g. eu-1=outboxd")
	envflag.Bind(fs, "shard-schema", "OUTBOXD_SHARD_SCHEMAS")
}

// Shard is one of the application's databases, as --shard-database
// names it.
type Shard struct {
	Name   string
	URL    string
	Schema string
}

// shardName is what a shard may be called: a label value and a log field.
var shardName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// CheckShardName says what is wrong with a shard's name, for setting.
func CheckShardName(setting, name string) error {
	if !shardName.MatchString(name) {
		return Usagef("%s is %.80q: give 1 to 64 lower-case letters, digits, '-' or '_', e.g. eu-1", setting, name)
	}
	return nil
}

// ParseShards reads --shard-database entries (name=postgres://…, several
// to an entry separated by spaces) and --shard-schema (name=schema; the
// others get defaultSchema), naming the setting at fault.
func ParseShards(entries []string, schemas map[string]string, defaultSchema string) ([]Shard, error) {
	var out []Shard
	has := func(name string) bool { return slices.ContainsFunc(out, func(s Shard) bool { return s.Name == name }) }
	for _, entry := range entries {
		for _, field := range strings.Fields(entry) {
			name, url, ok := strings.Cut(field, "=")
			if !ok || !shardName.MatchString(name) {
				return nil, Usagef("--shard-database (OUTBOXD_SHARD_DATABASES) %.40q: give name=postgres://… with a name of 1 to 64 lower-case letters, digits, '-' or '_', e.g. eu-1=postgres://outboxd@eu-1.db/app", Redact(field))
			}
			if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
				return nil, Usagef("--shard-database (OUTBOXD_SHARD_DATABASES) %s: give the database as a postgres:// URL (entries are separated by spaces)", name)
			}
			if has(name) {
				return nil, Usagef("--shard-database (OUTBOXD_SHARD_DATABASES) names shard %s twice: each shard once", name)
			}
			schema := defaultSchema
			if v, ok := schemas[name]; ok {
				schema = v
			}
			out = append(out, Shard{Name: name, URL: url, Schema: schema})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(schemas)) {
		if !has(name) {
			return nil, Usagef("--shard-schema (OUTBOXD_SHARD_SCHEMAS) %s=%s: no --shard-database names shard %s", name, schemas[name], name)
		}
		if err := migrations.ValidSchema(schemas[name]); err != nil {
			return nil, Usagef("--shard-schema (OUTBOXD_SHARD_SCHEMAS) %s: %w", name, err)
		}
	}
	return out, nil
}
