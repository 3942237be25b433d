package dynamostore

import (
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// headMemo is, per partition (by the head's pk), the head item as this
// Store's latest consistent look at it showed it, and when that look
// completed: a consistent read (TouchPartition, readHead, GetRows), or
// the image a head update returned (the small commit point's new or
// refused head, TouchPartition's lastSeenAt refresh, a partition just
// created). A small commit's wave 1 takes the head from it instead of
// reading it again (fast.go, "The head wave 1 follows"). Every write
// of this Store to a head drops what it remembers of it (wroteItem), so
// its own writes never leave it a head it knows is stale; other
// instances' writes do, for at most headMemoAge.
type headMemo struct {
	mu sync.Mutex
	m  map[string]seenHead
	// logged is, per partition (by the log's pk), the last small commit
	// whose log item this Store wrote or found present with its own
	// put-if-absent (finishSmall), so a log item known to exist.
	logged map[string]loggedCommit
}

// loggedCommit names a small commit by its seq and its log item's
// identity (client, commit id, creation time), so a partition created
// again under the same name, whose seqs start over, never matches it.
type loggedCommit struct {
	seq              int64
	client, commitID string
	createdAtMs      int64
}

func loggedCommitOf(seq int64, logItem map[string]types.AttributeValue) loggedCommit {
	c := loggedCommit{seq: seq}
	c.client, _ = getS(logItem, lClient)
	c.commitID, _ = getS(logItem, lCommit)
	c.createdAtMs, _ = getN(logItem, lCreated)
	return c
}

// noteLogged records that small commit seq's log item (logItem, or its
// attributes without the key) exists.
func (s *Store) noteLogged(p string, seq int64, logItem map[string]types.AttributeValue) {
	s.heads.mu.Lock()
	defer s.heads.mu.Unlock()
	if s.heads.logged == nil || len(s.heads.logged) >= indexMemoryMax {
		s.heads.logged = make(map[string]loggedCommit)
	}
	s.heads.logged[logPK(p)] = loggedCommitOf(seq, logItem)
}

// knowsLogged reports whether this Store wrote (or found) the log item of
// the small commit seq whose log attributes pendLog a head carries.
func (s *Store) knowsLogged(p string, seq int64, pendLog map[string]types.AttributeValue) bool {
	if pendLog == nil {
		return false
	}
	s.heads.mu.Lock()
	got, ok := s.heads.logged[logPK(p)]
	s.heads.mu.Unlock()
	return ok && got == loggedCommitOf(seq, pendLog)
}

type seenHead struct {
	item map[string]types.AttributeValue // never modified once stored
	at   time.Time
}

// headMemoAge bounds how old a remembered head wave 1 may follow. The
// bound is for cost, not correctness (fast.go): what the memory is for
// is the few milliseconds between a push's head read and its commit in
// the same request (evaluation, validators; well under a second even
// for 500 operations), and a partition's next push reads the head again
// anyway. An older head is more likely to differ from the stored one in
// an attribute the commit point checks (a rejection's count, the gate
// token, the log-index flag), which costs the refused update (1 WCU) and
// a retry; 2 s keeps every head a request reads itself while a Lambda
// instance frozen between requests never commits on a head of an
// earlier request.
const headMemoAge = 2 * time.Second

// noteHeadItem remembers item, p's head as a consistent read or a head
// update just returned it. The caller hands item over: nothing modifies
// it afterwards.
func (s *Store) noteHeadItem(p string, item map[string]types.AttributeValue) {
	if item == nil {
		return
	}
	now := time.Now()
	s.heads.mu.Lock()
	defer s.heads.mu.Unlock()
	if s.heads.m == nil {
		s.heads.m = make(map[string]seenHead)
	}
	if len(s.heads.m) >= indexMemoryMax {
		// Full: drop what is too old to be used, then everything.
		for k, v := range s.heads.m {
			if now.Sub(v.at) > headMemoAge {
				delete(s.heads.m, k)
			}
		}
		if len(s.heads.m) >= indexMemoryMax {
			clear(s.heads.m)
		}
	}
	s.heads.m[headPK(p)] = seenHead{item: item, at: now}
}

// forgetHead drops p's remembered head.
func (s *Store) forgetHead(p string) { s.forgetHeadPK(headPK(p)) }

func (s *Store) forgetHeadPK(pk string) {
	s.heads.mu.Lock()
	defer s.heads.mu.Unlock()
	delete(s.heads.m, pk)
}

// wroteItem is told the key (or whole item) of every write this Store
// sends: a head's is forgotten once the write returned, whatever its
// result.
func (s *Store) wroteItem(key map[string]types.AttributeValue) {
	if sk, _ := getS(key, AttrSK); sk == headSK {
		pk, _ := getS(key, AttrPK)
		s.forgetHeadPK(pk)
	}
}

// recentHead is p's remembered head item when it is at most
// headMemoAge old and shows maxCommitSeq = mx; nil otherwise. The item
// is shared: callers only read it.
func (s *Store) recentHead(p string, mx int64) map[string]types.AttributeValue {
	item := s.lastHead(p)
	if got, ok := getN(item, hMax); !ok || got != mx {
		return nil
	}
	return item
}

// lastHead is p's remembered head item when it is at most headMemoAge
// old, whatever its maxCommitSeq; nil otherwise. The item is shared:
// callers only read it.
func (s *Store) lastHead(p string) map[string]types.AttributeValue {
	s.heads.mu.Lock()
	seen, ok := s.heads.m[headPK(p)]
	s.heads.mu.Unlock()
	if !ok || time.Since(seen.at) > headMemoAge {
		return nil
	}
	return seen.item
}
