package memstore

import (
	"hash/maphash"
	"math"
	"strings"
	"unsafe"
)

// A partition's commit log and outcome index hold no Go object per
// commit. Encoded entries (logcodec.go) are copied into large append-only
// byte chunks (an arena), and the log and the outcome index only hold
// pointer-free positions into them: the collector then marks a few
// hundred chunks and two pointer-free tables however long the log grows,
// instead of one string (and, in the outcome map, two more) per commit.
//
// The invariant that makes handing out views safe: a chunk's bytes are
// written only through the slice alloc returns, right after alloc, under
// the partition's write lock and before any position pointing at them is
// published; they are never modified afterwards, and a chunk is never
// reused. Readers may therefore take a string over them (unsafe.String)
// under the read lock and keep using it after the lock is released; a
// chunk the store drops stays alive for as long as such a string does.

const (
	// A new chunk is as large as the chunks the arena holds together,
	// between minChunk and maxChunk: a partition that sees a few commits
	// (or whose log was pruned away) does not cost a quarter megabyte,
	// and the room an arena leaves unused stays within about what it
	// holds. An entry larger than the chunk due gets a chunk of its own
	// size.
	minChunk = 1 << 10
	maxChunk = 256 << 10
	// outArenaBit marks an outRef chunk number as one of the outcome
	// arena rather than the log arena.
	outArenaBit = 1 << 31
)

// arena is an append-only sequence of chunks numbered from first; only
// the last one has room. Numbers are never reused, so a position stays
// valid until the chunk it names is dropped.
type arena struct {
	chunks [][]byte
	first  uint32
	held   int // Σ cap(chunks)
}

// span locates bytes in an arena.
type span struct{ chunk, off, n uint32 }

// alloc reserves n bytes and returns their position and the slice to
// write them through (see the invariant above).
func (a *arena) alloc(n int) (span, []byte) {
	if n > math.MaxUint32/2 {
		panic("memstore: arena entry too large")
	}
	k := len(a.chunks) - 1
	if k < 0 || cap(a.chunks[k])-len(a.chunks[k]) < n {
		if a.first+uint32(len(a.chunks)) >= outArenaBit {
			panic("memstore: arena chunk numbers exhausted")
		}
		size := max(min(max(a.held, minChunk), maxChunk), n)
		a.chunks = append(a.chunks, make([]byte, 0, size))
		a.held += size
		k++
	}
	c := a.chunks[k]
	off := len(c)
	a.chunks[k] = c[:off+n]
	return span{a.first + uint32(k), uint32(off), uint32(n)}, c[off : off+n : off+n]
}

// str returns the bytes at s as a string over the chunk (no copy).
func (a *arena) str(s span) string {
	return a.view(s.chunk, s.off, s.n)
}

func (a *arena) view(chunk, off, n uint32) string {
	return viewBytes(a.chunks[chunk-a.first][off : off+n])
}

// end is the number the next chunk will get.
func (a *arena) end() uint32 { return a.first + uint32(len(a.chunks)) }

// dropBefore releases the chunks numbered below chunk (at most end()).
func (a *arena) dropBefore(chunk uint32) {
	k := int(chunk - a.first)
	if k <= 0 {
		return
	}
	for _, c := range a.chunks[:k] {
		a.held -= cap(c)
	}
	a.chunks = append([][]byte(nil), a.chunks[k:]...)
	a.first = chunk
}

// outRef locates a recorded outcome and its key (appendOutcomeKey) in one
// of the partition's arenas: for a logged commit both lie in its log
// entry, for a rejection or a pruned commit's outcome they are one
// record, key then outcome, of the outcome arena.
type outRef struct {
	chunk          uint32 // | outArenaBit in the outcome arena
	keyOff, keyLen uint32
	outOff, outLen uint32
}

// outcomeIndex finds outcomes by the maphash of their key. The key
// stored in the arena is compared on every hit, and a key whose hash is
// already taken by another key goes to overflow, so a hash collision
// costs a string map entry, never a wrong answer.
type outcomeIndex struct {
	seed     maphash.Seed
	byHash   map[uint64]outRef
	overflow map[string]outRef // keys own their memory
	// collide makes every key hash alike (tests of the overflow path).
	collide bool
}

func (p *partState) arenaOf(chunk uint32) (*arena, uint32) {
	if chunk&outArenaBit != 0 {
		return &p.outArena, chunk &^ outArenaBit
	}
	return &p.logArena, chunk
}

func (p *partState) outKey(r outRef) string {
	a, c := p.arenaOf(r.chunk)
	return a.view(c, r.keyOff, r.keyLen)
}

// outcomeLocked returns the encoded outcome r points at.
func (p *partState) outcomeLocked(r outRef) string {
	a, c := p.arenaOf(r.chunk)
	return a.view(c, r.outOff, r.outLen)
}

func (x *outcomeIndex) hash(k string) uint64 {
	if x.collide {
		return 0
	}
	return maphash.String(x.seed, k)
}

// findOutcomeLocked returns the outcome of key k (hash h) and whether it
// sits in the overflow map. Called under a lock.
func (p *partState) findOutcomeLocked(h uint64, k string) (r outRef, overflow, ok bool) {
	if r, ok := p.outcomes.byHash[h]; ok && p.outKey(r) == k {
		return r, false, true
	}
	if len(p.outcomes.overflow) > 0 {
		if r, ok := p.outcomes.overflow[k]; ok {
			return r, true, true
		}
	}
	return outRef{}, false, false
}

// addOutcomeLocked records r for key k (hash h), which has no outcome
// yet. Called under the write lock.
func (p *partState) addOutcomeLocked(h uint64, k string, r outRef) {
	if _, taken := p.outcomes.byHash[h]; !taken {
		p.outcomes.byHash[h] = r
		return
	}
	if p.outcomes.overflow == nil {
		p.outcomes.overflow = make(map[string]outRef)
	}
	p.outcomes.overflow[strings.Clone(k)] = r
}

// putOutcomeLocked appends key k and encoded outcome o to the outcome
// arena and returns their position.
func (p *partState) putOutcomeLocked(k, o string) outRef {
	sp, b := p.outArena.alloc(len(k) + len(o))
	copy(b, k)
	copy(b[len(k):], o)
	return outRef{chunk: sp.chunk | outArenaBit, keyOff: sp.off, keyLen: uint32(len(k)), outOff: sp.off + uint32(len(k)), outLen: uint32(len(o))}
}

// keepOutcomeLocked moves the outcome of log entry e, whose chunk is
// about to be dropped, to the outcome arena: outcomes outlive pruning
// (store.Store.Prune). Called under the write lock.
func (p *partState) keepOutcomeLocked(e string) {
	k := entryKey(e)
	h := p.outcomes.hash(k)
	r, overflow, ok := p.findOutcomeLocked(h, k)
	if !ok || r.chunk&outArenaBit != 0 {
		return
	}
	r = p.putOutcomeLocked(k, p.outcomeLocked(r))
	if overflow {
		// The assignment stores its key again: clone it, k is about to
		// go with its chunk.
		p.outcomes.overflow[strings.Clone(k)] = r
	} else {
		p.outcomes.byHash[h] = r
	}
}

// viewBytes returns b as a string without copying; b must not be
// modified while the string is in use.
func viewBytes(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
