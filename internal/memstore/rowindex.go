package memstore

import (
	"sort"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Block bounds of rowIndex. Blocks stay small enough that an insert's
// memmove is cheap and few enough that the block directory is tiny: with
// 100,000 rows there are a few hundred blocks.
const (
	maxBlock = 512
	minBlock = maxBlock / 4
)

// rowEntry is the stored state of one row. The index and the id map share
// the pointer, so an update rewrites the row in place without a seek.
type rowEntry struct {
	row store.Row
}

// rowIndex keeps a table's rows in ascending rowId byte order as a list of
// sorted blocks (a two-level B-tree): seek is two binary searches, a scan
// walks blocks in order, and insert/delete move at most one block's
// pointers plus, rarely, the block directory.
type rowIndex struct {
	blocks [][]*rowEntry
}

// seek returns the position of the first entry whose id is >= id; bi ==
// len(blocks) when every id is smaller.
func (x *rowIndex) seek(id string) (bi, i int) {
	bi = sort.Search(len(x.blocks), func(k int) bool {
		b := x.blocks[k]
		return b[len(b)-1].row.RowID >= id
	})
	if bi == len(x.blocks) {
		return bi, 0
	}
	b := x.blocks[bi]
	i = sort.Search(len(b), func(k int) bool { return b[k].row.RowID >= id })
	return bi, i
}

// insert adds e, whose id must not be present.
func (x *rowIndex) insert(e *rowEntry) {
	if len(x.blocks) == 0 {
		x.blocks = append(x.blocks, append(make([]*rowEntry, 0, 16), e))
		return
	}
	bi, i := x.seek(e.row.RowID)
	if bi == len(x.blocks) {
		bi = len(x.blocks) - 1
		i = len(x.blocks[bi])
	}
	b := x.blocks[bi]
	b = append(b, nil)
	copy(b[i+1:], b[i:])
	b[i] = e
	if len(b) <= maxBlock {
		x.blocks[bi] = b
		return
	}
	// Split in halves; the right half gets its own backing array so the
	// two blocks never share capacity.
	half := len(b) / 2
	right := make([]*rowEntry, len(b)-half, maxBlock+1)
	copy(right, b[half:])
	clear(b[half:])
	x.blocks[bi] = b[:half]
	x.blocks = append(x.blocks, nil)
	copy(x.blocks[bi+2:], x.blocks[bi+1:])
	x.blocks[bi+1] = right
}

// remove deletes the entry with id if present, merging an underfull block
// into its right neighbour so deletions cannot leave a directory of tiny
// blocks behind.
func (x *rowIndex) remove(id string) {
	bi, i := x.seek(id)
	if bi == len(x.blocks) || x.blocks[bi][i].row.RowID != id {
		return
	}
	b := x.blocks[bi]
	copy(b[i:], b[i+1:])
	b[len(b)-1] = nil
	b = b[:len(b)-1]
	x.blocks[bi] = b
	switch {
	case len(b) == 0:
		x.dropBlock(bi)
	case len(b) < minBlock && bi+1 < len(x.blocks) && len(b)+len(x.blocks[bi+1]) <= maxBlock:
		x.blocks[bi] = append(b, x.blocks[bi+1]...)
		x.dropBlock(bi + 1)
	}
}

func (x *rowIndex) dropBlock(bi int) {
	copy(x.blocks[bi:], x.blocks[bi+1:])
	x.blocks[len(x.blocks)-1] = nil
	x.blocks = x.blocks[:len(x.blocks)-1]
}

// ascend calls fn for entries in order, starting at the first id >= from
// (or strictly after from when exclusive), until fn returns false.
func (x *rowIndex) ascend(from string, exclusive bool, fn func(*rowEntry) bool) {
	bi, i := x.seek(from)
	if exclusive && bi < len(x.blocks) && x.blocks[bi][i].row.RowID == from {
		i++
	}
	for ; bi < len(x.blocks); bi, i = bi+1, 0 {
		b := x.blocks[bi]
		for ; i < len(b); i++ {
			if !fn(b[i]) {
				return
			}
		}
	}
}
