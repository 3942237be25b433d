// Package yjs merges Yjs document updates (update format version 1, the
// lib0 encoding that Y.encodeStateAsUpdate and the "update" event produce)
// in pure Go: the server side of a `yjs-doc` CRDT column (SPEC §5.10).
//
// Merge decodes every update, takes the union of their structs per client
// and the union of their delete sets, and encodes one update. Applying the
// result to a Y.Doc gives the same document as applying every input.
//
// Where updates overlap (the same client clocks appear in more than one),
// each clock is taken from the most informed struct covering it: a GC
// (content collected) before deleted content before live content, then the
// longest struct. Content the merged delete set covers is replaced by
// deleted content of the same length (except nested types), as a Y.Doc
// collects it. Consecutive items that Yjs would join (same origin chain
// and right origin, concatenable content) are joined into one, whatever
// splits the inputs had. The result depends only on the clocks' contents,
// never on the order or grouping of the inputs, so Merge is commutative,
// associative and idempotent on the bytes it returns (§5.10.2), not only on
// the documents they encode.
//
// Malformed input is an error wrapping ErrMalformed, never a panic; every
// allocation is bounded by the input's size.
package yjs

import (
	"bytes"
	"cmp"
	"container/heap"
	"fmt"
	"slices"
)

// Merge merges Yjs version-1 updates into one version-1 update. With no
// updates it returns the empty update. A single update is re-encoded (and
// so validated).
func Merge(updates ...[]byte) ([]byte, error) {
	var in update
	for i, data := range updates {
		if err := decode(data, &in); err != nil {
			return nil, fmt.Errorf("update %d of %d: %w", i+1, len(updates), err)
		}
	}
	deletes := mergeDeletes(in.deletes)
	out := update{blocks: mergeStructs(in.blocks, deletes), deletes: deletes}
	return out.encode(), nil
}

// rank orders the structs that can describe the same clocks by how much
// they know: collected content, then deleted content, then live content.
func rank(b *block) int {
	switch {
	case b.kind == kindGC:
		return 2
	case b.content.ref == refDeleted:
		return 1
	default:
		return 0
	}
}

// preferred reports whether a should describe the clocks both cover
// rather than b; it is a strict total order for distinct encodings.
func preferred(a, b *block) bool {
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra > rb
	}
	if a.end() != b.end() {
		return a.end() > b.end()
	}
	if a.clock != b.clock {
		return a.clock < b.clock
	}
	return bytes.Compare(a.src, b.src) < 0
}

// mergeStructs resolves the structs of all updates into one contiguous
// run per client (descending clients, ascending clocks, Skips in holes).
func mergeStructs(blocks []block, deletes []deleteRange) []block {
	order := make([]*block, len(blocks))
	for i := range blocks {
		order[i] = &blocks[i]
	}
	slices.SortFunc(order, func(a, b *block) int {
		if c := cmp.Compare(b.client, a.client); c != 0 {
			return c
		}
		return cmp.Compare(a.clock, b.clock)
	})
	out := make([]block, 0, len(blocks))
	for i := 0; i < len(order); {
		j := i
		for j < len(order) && order[j].client == order[i].client {
			j++
		}
		client := order[i].client
		for len(deletes) > 0 && deletes[0].client > client {
			deletes = deletes[1:]
		}
		k := 0
		for k < len(deletes) && deletes[k].client == client {
			k++
		}
		first := len(out)
		out = resolveClient(out, order[i:j])
		out = coalesce(dropDeleted(out, first, deletes[:k]), first)
		i = j
	}
	return out
}

// dropDeleted replaces the content of every item clock in out[first:] that
// the delete set covers by deleted content of the same length, as a Y.Doc
// collects deleted content: the document is the same, the bytes fewer.
// Type items keep their content (their children name them as parent).
func dropDeleted(out []block, first int, ranges []deleteRange) []block {
	if len(ranges) == 0 {
		return out
	}
	var tail []block
	for i := first; i < len(out); i++ {
		b := out[i]
		if b.kind != kindItem || b.content.ref == refDeleted || b.content.ref == refType {
			tail = append(tail, b)
			continue
		}
		for len(ranges) > 0 && ranges[0].clock+ranges[0].length <= b.clock {
			ranges = ranges[1:]
		}
		at := b.clock
		for _, d := range ranges {
			if d.clock >= b.end() {
				break
			}
			lo, hi := max(d.clock, at), min(d.clock+d.length, b.end())
			if lo > at {
				tail = append(tail, b.slice(at, lo))
			}
			gone := b.slice(lo, hi)
			gone.content = content{ref: refDeleted}
			tail = append(tail, gone)
			at = hi
		}
		if at < b.end() {
			tail = append(tail, b.slice(at, b.end()))
		}
	}
	return append(out[:first], tail...)
}

// cover is a max-heap of the structs covering the current clock, the
// preferred one on top.
type cover []*block

func (h cover) Len() int           { return len(h) }
func (h cover) Less(i, j int) bool { return preferred(h[i], h[j]) }
func (h cover) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cover) Push(x any)        { *h = append(*h, x.(*block)) }
func (h *cover) Pop() any {
	old := *h
	b := old[len(old)-1]
	*h = old[:len(old)-1]
	return b
}

// resolveClient appends to out the merged run of one client's structs
// (sorted by clock). It sweeps the elementary intervals between all struct
// boundaries, takes each interval from the preferred covering struct, and
// joins consecutive intervals taken from the same struct.
func resolveClient(out []block, segs []*block) []block {
	first := len(out)
	if disjoint(segs) {
		// The common case (a stored document and a new update): nothing
		// to choose between.
		for _, b := range segs {
			out = appendPiece(out, *b)
		}
		return coalesce(out, first)
	}
	points := make([]uint64, 0, 2*len(segs))
	for _, b := range segs {
		points = append(points, b.clock, b.end())
	}
	slices.Sort(points)
	points = slices.Compact(points)

	var h cover
	scratch := &[2]writer{}
	next := 0
	var cur *block
	var curLo, curHi uint64
	for k := 0; k+1 < len(points); k++ {
		lo, hi := points[k], points[k+1]
		for next < len(segs) && segs[next].clock <= lo {
			heap.Push(&h, segs[next])
			next++
		}
		for h.Len() > 0 && h[0].end() <= lo {
			heap.Pop(&h)
		}
		if h.Len() == 0 {
			continue // a hole: no update has these clocks
		}
		best := h[0]
		if h.Len() > 1 {
			var made *block
			if best, made = breakTie(h, lo, hi, scratch); made != nil {
				if cur != nil {
					out = appendPiece(out, cur.slice(curLo, curHi))
				}
				out = appendPiece(out, *made)
				cur = nil
				continue
			}
		}
		if best == cur && curHi == lo {
			curHi = hi
			continue
		}
		if cur != nil {
			out = appendPiece(out, cur.slice(curLo, curHi))
		}
		cur, curLo, curHi = best, lo, hi
	}
	if cur != nil {
		out = appendPiece(out, cur.slice(curLo, curHi))
	}
	return coalesce(out, first)
}

// disjoint reports whether no two of segs (sorted by clock) share a clock.
func disjoint(segs []*block) bool {
	for i := 1; i < len(segs); i++ {
		if segs[i].clock < segs[i-1].end() {
			return false
		}
	}
	return true
}

// breakTie picks, among the structs of the top rank covering [lo, hi),
// the one to take the interval from. Honest updates agree on every clock
// but one way: a document that split a surrogate pair holds U+FFFD where
// another still has the pair's halves (and an update that starts inside a
// pair has U+FFFD for its low half). For strings the result is built clock
// by clock from the smaller code unit, so a surrogate half wins over
// U+FFFD (the pair is the original content; Yjs re-splits it if an insert
// falls between the halves), and returned as a new piece; for other content the slice with the smallest encoding wins. The
// choice depends on the clocks' contents only, so it is the same whatever
// the order and grouping of the inputs.
func breakTie(h cover, lo, hi uint64, scratch *[2]writer) (*block, *block) {
	best := h[0]
	top := rank(best)
	var bestEnc []byte
	var units []uint16
	for _, b := range h[1:] {
		if b.end() <= lo || rank(b) != top {
			continue
		}
		if best.kind == kindItem && best.content.ref == refString && b.content.ref == refString {
			if units == nil {
				units = slices.Clone(best.slice(lo, hi).content.units)
			}
			other := b.slice(lo, hi).content.units
			for i := range units {
				units[i] = min(units[i], other[i]) // surrogate halves sort below U+FFFD
			}
			continue
		}
		if bestEnc == nil {
			scratch[0].buf = scratch[0].buf[:0]
			piece := best.slice(lo, hi)
			writeBlock(&scratch[0], &piece)
			bestEnc = scratch[0].buf
		}
		scratch[1].buf = scratch[1].buf[:0]
		piece := b.slice(lo, hi)
		writeBlock(&scratch[1], &piece)
		if bytes.Compare(scratch[1].buf, bestEnc) < 0 {
			best = b
			scratch[0], scratch[1] = scratch[1], scratch[0]
			bestEnc = scratch[0].buf
		}
	}
	if units != nil {
		piece := best.slice(lo, hi)
		piece.content.units = units
		return best, &piece
	}
	return best, nil
}

// mergeable reports whether item b continues item a as one item: b starts
// where a ends, has a's last clock as its origin, the same right origin,
// and content of the same kind that Yjs concatenates. Yjs only ever joins
// such items, and splits them the same way, so the longest run of them is
// one canonical item whatever splits the inputs had.
func mergeable(a, b *block) bool {
	if a.kind != kindItem || b.kind != kindItem || a.client != b.client || a.end() != b.clock {
		return false
	}
	if !b.hasOrigin || b.origin != (id{b.client, b.clock - 1}) {
		return false
	}
	if a.hasRightOrigin != b.hasRightOrigin || (a.hasRightOrigin && a.rightOrigin != b.rightOrigin) {
		return false
	}
	if a.content.ref != b.content.ref {
		return false
	}
	switch a.content.ref {
	case refString, refAny, refJSON, refDeleted:
		return true
	}
	return false
}

// coalesce joins, in out[first:], every run of mergeable items into one.
func coalesce(out []block, first int) []block {
	w := first
	for i := first; i < len(out); {
		j := i + 1
		for j < len(out) && mergeable(&out[j-1], &out[j]) {
			j++
		}
		b := out[i]
		if j > i+1 {
			b = join(out[i:j])
		}
		out[w] = b
		w++
		i = j
	}
	return out[:w]
}

// join makes one item of a run of mergeable items.
func join(run []block) block {
	b := run[0]
	last := &run[len(run)-1]
	b.length = last.end() - b.clock
	switch b.content.ref {
	case refString:
		units := make([]uint16, 0, b.length)
		for i := range run {
			units = append(units, run[i].content.units...)
		}
		b.content.units = units
	case refAny, refJSON:
		elems := make([][]byte, 0, b.length)
		for i := range run {
			elems = append(elems, run[i].content.elems...)
		}
		b.content.elems = elems
	}
	return b
}

// appendPiece appends b after the client's previous piece, with a Skip
// over any hole between them, and joins adjacent GCs into one.
func appendPiece(out []block, b block) []block {
	if n := len(out); n > 0 && out[n-1].client == b.client {
		last := &out[n-1]
		if gap := b.clock - last.end(); gap > 0 {
			out = append(out, block{kind: kindSkip, client: b.client, clock: last.end(), length: gap})
		} else if last.kind == kindGC && b.kind == kindGC {
			last.length += b.length
			return out
		}
	}
	return append(out, b)
}

// mergeDeletes sorts the delete ranges (clients descending, clocks
// ascending) and joins overlapping and adjacent ranges.
func mergeDeletes(ds []deleteRange) []deleteRange {
	slices.SortFunc(ds, func(a, b deleteRange) int {
		if c := cmp.Compare(b.client, a.client); c != 0 {
			return c
		}
		if c := cmp.Compare(a.clock, b.clock); c != 0 {
			return c
		}
		return cmp.Compare(a.length, b.length)
	})
	out := ds[:0]
	for _, d := range ds {
		if n := len(out); n > 0 && out[n-1].client == d.client && out[n-1].clock+out[n-1].length >= d.clock {
			last := &out[n-1]
			last.length = max(last.length, d.clock+d.length-last.clock)
			continue
		}
		out = append(out, d)
	}
	return out
}
