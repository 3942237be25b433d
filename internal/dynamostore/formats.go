package dynamostore

import (
	"context"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
)

// Store-format level: read first, write later (issue 20 item 1).
//
// A stored encoding that an older build cannot decode (log body format 3
// is the first) may be written only once no build that cannot read it
// serves anymore. During a deploy's traffic shift the old build still
// takes most requests; had the new build written such an item at once,
// the old build's pull or roll-forward over it would fail as corrupt, the
// deployment's server-error alarm would roll it back, and the old build
// would still not read what was written meanwhile.
//
// So every such format has a level in storedFormats below, and the schema
// marker item (SYS/SCHEMA) carries the table's level in attribute fl:
//
//   - a build reads every format up to its FormatLevel, always;
//   - a build writes a format only when the stored level is at or above
//     that format's level (and the format is one it reads), otherwise the
//     format every build reads, exactly as before that format existed;
//   - the level only rises (RaiseFormatLevel, a conditional update), and
//     only the post-traffic hook and syncular-admin migrate raise it
//     (migrate.Step), once every request runs on the new build, and no
//     higher than every live realtime tier instance reads (tierlevel.go);
//     a request never raises it.
//
// Writers learn the level from the marker copy each Store already keeps
// (markerCache): the item that brings the marker brings fl, in the
// BatchGetItem the request makes anyway, once per Options.MarkerTTL, so
// no item is read by every request (issue 20 item 3). A copy that lags
// only delays the new format: a writer with a stale, lower level writes
// the older format, which every build reads. Readers never consult the
// level: what a build can decode does not depend on it.
//
// After the hook raised the level, rolling back to a build whose
// FormatLevel is below it is not supported (it cannot read what was
// written since): roll forward. The hook refuses to report success for
// such a build (its check of the stored level), as it does for a newer
// schema marker.
//
// The next stored-format change appends its entry to storedFormats, keeps
// decoding the older formats, and gates its writes with
// Store.mayWrite(itsLevel).

// mFormatLevel is the marker item's store-format level attribute.
const mFormatLevel = "fl"

// Levels of storedFormats (index + 1).
const (
	// levelLogZstd: log bodies stored zstd-compressed (format 3,
	// logzstd.go).
	levelLogZstd int64 = 1
	// levelSmallCommits: small commits in the order of fast.go (no
	// appliedSeq write; a commit's log item, written last, shows it
	// materialized). A build from before that order finishes a pending
	// small commit by writing its log item beside its rows, so while one
	// may still serve, a log item could exist before the rows it
	// vouches for; until the level allows it every commit takes the
	// transaction, which every build reads.
	levelSmallCommits int64 = 2
)

// storedFormats is the one table "format → level": entry i is the format
// writers may use from level i+1 on. Append only.
var storedFormats = [...]string{
	levelLogZstd - 1:      "log body format 3 (zstd-compressed, logzstd.go)",
	levelSmallCommits - 1: "small commits without an appliedSeq write (fast.go)",
}

// FormatLevel is the store-format level this build reads every format of:
// the highest level of storedFormats. The hook and syncular-admin migrate
// raise the table's level to it.
const FormatLevel = int64(len(storedFormats))

// formatName names the format of level l (logs and errors).
func formatName(l int64) string {
	if l < 1 || l > FormatLevel {
		return fmt.Sprintf("stored format level %d", l)
	}
	return storedFormats[l-1]
}

// mayWrite reports whether this Store may write the format of level l:
// the table's level (the cached copy) allows it and this Store reads it.
func (s *Store) mayWrite(l int64) bool {
	return l <= s.readLevel && l <= s.marker.level.Load()
}

// StoredFormatLevel reads the table's store-format level (consistent,
// never from the cache, which it refreshes).
func (s *Store) StoredFormatLevel(ctx context.Context) (int64, error) {
	return s.readMarker(ctx, "read store-format level", mFormatLevel)
}

// RaiseFormatLevel raises the table's store-format level towards this
// build's FormatLevel, but not above the lowest level a live realtime
// tier instance reads (tierlevel.go): one read of the instance registry,
// then one conditional update of the marker item that never lowers it.
// It returns the stored level and what held it back. A level above this
// build's (a newer build raised it) is an error: this build cannot read
// everything stored, roll forward only. Only the migration step calls it
// (migrate.Step), after all traffic to the functions is on this build.
func (s *Store) RaiseFormatLevel(ctx context.Context) (migrate.FormatRaise, error) {
	r := migrate.FormatRaise{Target: s.readLevel}
	limit, live, err := s.tierReadLevel(ctx)
	if err != nil {
		return r, err
	}
	to := s.readLevel
	if live > 0 {
		r.Readers, r.Limit = live, limit
		to = min(to, limit)
	}
	if r.Level, err = s.raiseMarker(ctx, "raise store-format level", mFormatLevel, to); err != nil {
		return r, err
	}
	if r.Level > s.readLevel {
		return r, fmt.Errorf("dynamostore: stored store-format level %d is above this build's %d: roll forward only", r.Level, s.readLevel)
	}
	return r, nil
}
