package yjs

import (
	"encoding/json"
	"slices"
	"unicode/utf16"
)

// Struct kinds of the update format. An info byte of exactly 10 is a Skip
// (a hole in a client's clock range); a zero content reference is a GC
// (deleted, garbage-collected content); anything else is an Item.
const (
	infoSkip = 10

	flagOrigin      = 0x80 // the item names its left origin
	flagRightOrigin = 0x40 // the item names its right origin
	flagParentSub   = 0x20 // the item is a map entry (parent key follows)
	contentMask     = 0x1f
)

// Content references (the low five bits of an item's info byte).
const (
	refGC      = 0
	refDeleted = 1
	refJSON    = 2
	refBinary  = 3
	refString  = 4
	refEmbed   = 5
	refFormat  = 6
	refType    = 7
	refAny     = 8
	refDoc     = 9
)

// Type references of ContentType. XML elements and hooks carry a name.
const (
	typeXMLElement = 3
	typeXMLHook    = 5
	typeLast       = 6
)

type structKind uint8

const (
	kindItem structKind = iota
	kindGC
	kindSkip
)

// id is a Yjs struct identifier: the creating client and its clock.
type id struct{ client, clock uint64 }

// parentKind says how an item without origins names its parent.
type parentKind uint8

const (
	parentNone parentKind = iota // the item has an origin; its parent is implied
	parentRoot                   // a root type, named by key
	parentItem                   // a nested type, named by the ID of its item
)

// content is an item's payload. Kinds that always have length 1 (binary,
// embed, format, type, doc) keep their encoded bytes verbatim in raw;
// JSON and any keep one encoded element per clock in elems; a string keeps
// its UTF-16 code units, one per clock (Yjs counts a string's clocks as
// JavaScript's String.length), so a slice may end between the halves of a
// surrogate pair and a later join restores the pair; deleted content has
// only a length.
type content struct {
	ref   uint8
	raw   []byte
	elems [][]byte
	units []uint16
}

// block is one struct of an update: an Item, a GC or a Skip covering the
// clocks [clock, clock+length) of client.
type block struct {
	kind          structKind
	client, clock uint64
	length        uint64

	// Item fields.
	origin, rightOrigin       id
	hasOrigin, hasRightOrigin bool
	parent                    parentKind
	parentKey                 string // parentRoot: the root type's name
	parentID                  id     // parentItem: the parent type's item
	hasParentSub              bool
	parentSub                 string
	content                   content

	// src is the struct's encoding in its input, a deterministic tie-break
	// between two blocks of equal rank covering the same clocks.
	src []byte
}

func (b *block) end() uint64 { return b.clock + b.length }

// update is a decoded version-1 update.
type update struct {
	blocks  []block
	deletes []deleteRange
}

// deleteRange is one entry of a delete set.
type deleteRange struct{ client, clock, length uint64 }

// decode parses a Yjs update in the version-1 encoding, appending its
// Items and GCs to u.blocks (Skips only mark holes and are dropped) and
// its delete ranges to u.deletes: the struct section (per client: a struct
// count, the client, its first clock, then the structs), then the delete
// set. Bytes after the delete set are ignored, as Yjs ignores them.
func decode(data []byte, u *update) error {
	r := &reader{buf: data}
	clients, err := r.count("client")
	if err != nil {
		return err
	}
	for range clients {
		n, err := r.count("struct")
		if err != nil {
			return err
		}
		client, err := r.varUint()
		if err != nil {
			return err
		}
		clock, err := r.varUint()
		if err != nil {
			return err
		}
		u.blocks = slices.Grow(u.blocks, n)
		for range n {
			start := r.pos
			b, err := readBlock(r, client, clock)
			if err != nil {
				return err
			}
			clock = b.end()
			if b.kind != kindSkip {
				b.src = data[start:r.pos]
				u.blocks = append(u.blocks, b)
			}
		}
	}
	ds, err := readDeleteSet(r)
	u.deletes = append(u.deletes, ds...)
	return err
}

func readDeleteSet(r *reader) ([]deleteRange, error) {
	clients, err := r.count("delete-set client")
	if err != nil {
		return nil, err
	}
	var out []deleteRange
	for range clients {
		client, err := r.varUint()
		if err != nil {
			return nil, err
		}
		n, err := r.count("delete range")
		if err != nil {
			return nil, err
		}
		out = slices.Grow(out, n)
		for range n {
			clock, err := r.varUint()
			if err != nil {
				return nil, err
			}
			length, err := r.varUint()
			if err != nil {
				return nil, err
			}
			if clock+length > maxSafeInteger {
				return nil, malformed("delete range %d+%d of client %d passes 2^53", clock, length, client)
			}
			if length > 0 {
				out = append(out, deleteRange{client, clock, length})
			}
		}
	}
	return out, nil
}

func readID(r *reader) (id, error) {
	client, err := r.varUint()
	if err != nil {
		return id{}, err
	}
	clock, err := r.varUint()
	return id{client, clock}, err
}

// readBlock reads one struct starting at clock. Its length must be at
// least 1 and keep the client's clock within 2^53.
func readBlock(r *reader, client, clock uint64) (block, error) {
	b := block{client: client, clock: clock}
	info, err := r.byte()
	if err != nil {
		return b, err
	}
	switch {
	case info == infoSkip:
		b.kind = kindSkip
		b.length, err = r.varUint()
	case info&contentMask == refGC:
		b.kind = kindGC
		b.length, err = r.varUint()
	default:
		err = readItem(r, info, &b)
	}
	if err != nil {
		return b, err
	}
	if b.length == 0 {
		return b, malformed("zero-length struct at client %d clock %d", client, clock)
	}
	if clock+b.length > maxSafeInteger {
		return b, malformed("struct at client %d clock %d passes clock 2^53", client, clock)
	}
	return b, nil
}

func readItem(r *reader, info byte, b *block) error {
	b.kind = kindItem
	var err error
	if info&flagOrigin != 0 {
		b.hasOrigin = true
		if b.origin, err = readID(r); err != nil {
			return err
		}
	}
	if info&flagRightOrigin != 0 {
		b.hasRightOrigin = true
		if b.rightOrigin, err = readID(r); err != nil {
			return err
		}
	}
	if !b.hasOrigin && !b.hasRightOrigin {
		isRoot, err := r.varUint()
		if err != nil {
			return err
		}
		if isRoot == 1 {
			b.parent = parentRoot
			if b.parentKey, err = r.str(); err != nil {
				return err
			}
		} else {
			b.parent = parentItem
			if b.parentID, err = readID(r); err != nil {
				return err
			}
		}
		if info&flagParentSub != 0 {
			b.hasParentSub = true
			if b.parentSub, err = r.str(); err != nil {
				return err
			}
		}
	}
	b.content.ref = info & contentMask
	b.length, err = readContent(r, &b.content)
	return err
}

// readContent reads an item's content and returns its length in clocks.
func readContent(r *reader, c *content) (uint64, error) {
	start := r.pos
	switch c.ref {
	case refDeleted:
		return r.varUint()
	case refJSON:
		n, err := r.count("JSON element")
		if err != nil {
			return 0, err
		}
		c.elems = make([][]byte, 0, n)
		for range n {
			at := r.pos
			s, err := r.str()
			if err != nil {
				return 0, err
			}
			if s != "undefined" && !json.Valid([]byte(s)) {
				return 0, malformed("JSON content element is not JSON at byte %d", at)
			}
			c.elems = append(c.elems, r.buf[at:r.pos])
		}
		return uint64(n), nil
	case refAny:
		n, err := r.count("content element")
		if err != nil {
			return 0, err
		}
		c.elems = make([][]byte, 0, n)
		for range n {
			at := r.pos
			if err := r.skipAny(0); err != nil {
				return 0, err
			}
			c.elems = append(c.elems, r.buf[at:r.pos])
		}
		return uint64(n), nil
	case refString:
		s, err := r.str()
		if err != nil {
			return 0, err
		}
		c.units = utf16.Encode([]rune(s))
		return uint64(len(c.units)), nil
	case refBinary:
		if _, err := r.bytes(); err != nil {
			return 0, err
		}
	case refEmbed:
		if err := readJSONString(r); err != nil {
			return 0, err
		}
	case refFormat:
		if _, err := r.str(); err != nil {
			return 0, err
		}
		if err := readJSONString(r); err != nil {
			return 0, err
		}
	case refType:
		t, err := r.varUint()
		if err != nil {
			return 0, err
		}
		if t > typeLast {
			return 0, malformed("unknown type reference %d at byte %d", t, start)
		}
		if t == typeXMLElement || t == typeXMLHook {
			if _, err := r.str(); err != nil {
				return 0, err
			}
		}
	case refDoc:
		if _, err := r.str(); err != nil {
			return 0, err
		}
		if err := r.skipAny(0); err != nil {
			return 0, err
		}
	default:
		return 0, malformed("unknown content reference %d at byte %d", c.ref, start-1)
	}
	c.raw = r.buf[start:r.pos]
	return 1, nil
}

func readJSONString(r *reader) error {
	at := r.pos
	s, err := r.str()
	if err != nil {
		return err
	}
	if !json.Valid([]byte(s)) {
		return malformed("JSON value is not JSON at byte %d", at)
	}
	return nil
}

// slice returns the part of an item or GC covering clocks [lo, hi), which
// must lie within it. A slice that starts after the item's first clock has
// the previous clock as its origin and therefore no parent information,
// exactly as Yjs encodes the right part of a split item.
func (b *block) slice(lo, hi uint64) block {
	if lo == b.clock && hi == b.end() {
		return *b
	}
	out := *b
	out.clock, out.length = lo, hi-lo
	if b.kind != kindItem {
		return out
	}
	from, to := lo-b.clock, hi-b.clock
	if from > 0 {
		out.hasOrigin = true
		out.origin = id{b.client, lo - 1}
		out.parent = parentNone
		out.parentKey, out.hasParentSub, out.parentSub = "", false, ""
	}
	c := b.content
	switch c.ref {
	case refJSON, refAny:
		c.elems = c.elems[from:to]
	case refString:
		c.units = c.units[from:to]
	}
	out.content = c
	return out
}

// encode writes u in the version-1 encoding. The blocks must be grouped
// by client (descending, as Yjs writes them) and contiguous within a
// client; Skips fill any holes.
func (u *update) encode() []byte {
	w := &writer{buf: make([]byte, 0, 64)}
	clients := 0
	for i := range u.blocks {
		if i == 0 || u.blocks[i].client != u.blocks[i-1].client {
			clients++
		}
	}
	w.varUint(uint64(clients))
	for i := 0; i < len(u.blocks); {
		j := i
		for j < len(u.blocks) && u.blocks[j].client == u.blocks[i].client {
			j++
		}
		w.varUint(uint64(j - i))
		w.varUint(u.blocks[i].client)
		w.varUint(u.blocks[i].clock)
		for k := i; k < j; k++ {
			writeBlock(w, &u.blocks[k])
		}
		i = j
	}
	writeDeleteSet(w, u.deletes)
	return w.buf
}

func writeBlock(w *writer, b *block) {
	switch b.kind {
	case kindSkip:
		w.byte(infoSkip)
		w.varUint(b.length)
		return
	case kindGC:
		w.byte(refGC)
		w.varUint(b.length)
		return
	}
	info := b.content.ref
	if b.hasOrigin {
		info |= flagOrigin
	}
	if b.hasRightOrigin {
		info |= flagRightOrigin
	}
	if b.parent != parentNone && b.hasParentSub {
		info |= flagParentSub
	}
	w.byte(info)
	if b.hasOrigin {
		w.varUint(b.origin.client)
		w.varUint(b.origin.clock)
	}
	if b.hasRightOrigin {
		w.varUint(b.rightOrigin.client)
		w.varUint(b.rightOrigin.clock)
	}
	switch b.parent {
	case parentRoot:
		w.varUint(1)
		w.str(b.parentKey)
	case parentItem:
		w.varUint(0)
		w.varUint(b.parentID.client)
		w.varUint(b.parentID.clock)
	}
	if b.parent != parentNone && b.hasParentSub {
		w.str(b.parentSub)
	}
	switch b.content.ref {
	case refDeleted:
		w.varUint(b.length)
	case refJSON, refAny:
		w.varUint(uint64(len(b.content.elems)))
		for _, e := range b.content.elems {
			w.raw(e)
		}
	case refString:
		// A lone surrogate half becomes U+FFFD, as JavaScript's UTF-8
		// encoder writes it.
		w.str(string(utf16.Decode(b.content.units)))
	default:
		w.raw(b.content.raw)
	}
}

// writeDeleteSet writes ranges, sorted by client and clock, as Yjs does:
// clients in descending order, each with its ranges ascending.
func writeDeleteSet(w *writer, ranges []deleteRange) {
	clients := 0
	for i := range ranges {
		if i == 0 || ranges[i].client != ranges[i-1].client {
			clients++
		}
	}
	w.varUint(uint64(clients))
	for i := 0; i < len(ranges); {
		j := i
		for j < len(ranges) && ranges[j].client == ranges[i].client {
			j++
		}
		w.varUint(ranges[i].client)
		w.varUint(uint64(j - i))
		for _, d := range ranges[i:j] {
			w.varUint(d.clock)
			w.varUint(d.length)
		}
		i = j
	}
}
