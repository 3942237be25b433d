package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Rolling schema upgrades (store.SchemaStore). Items:
//
//	item            pk          sk          attributes
//	schema marker   SYS         SCHEMA      v (N), fl (N, the store-format level, formats.go), dv dg (N), dc (L)
//	checkpoint      P#<p>#K     K<name>     sv st src wm cur oe obs upd
//
// and four head attributes: rwv (N, the writer fence), pcs (SS, pending
// checkpoints as "<version>:<name>"), gt (N, the gate token, +1 on
// every fence, declare or activate change) and ckd (N, the generation of
// the table-wide declaration materialised in the partition). The
// marker's dv, dg and dc are the table-wide checkpoint declaration
// (DeclareCheckpoints): its version, generation and checkpoints, each a
// list [name, source...]. The marker is one item read
// beside the head in TouchPartition's BatchGetItem and never joins a
// commit transaction (an item in a transaction conflicts with every other
// transaction touching it, which would serialize all partitions). The
// commit's head condition carries the fence and, when asked, the token.

var _ store.SchemaStore = (*Store)(nil)

const (
	markerPK = "SYS"
	markerSK = "SCHEMA"
	mVersion = "v"
	mDeclV   = "dv"
	mDeclGen = "dg"
	mDecls   = "dc"

	hFence        = "rwv"
	hPending      = "pcs"
	hToken        = "gt"
	hMaterialized = "ckd"

	kVersion  = "sv"
	kState    = "st"
	kSources  = "src"
	kWater    = "wm"
	kCursor   = "cur"
	kEpoch    = "oe"
	kObserved = "obs"
	kUpdated  = "upd"
)

func checkpointPK(p string) string          { return PartitionPK(p) + "#K" }
func checkpointSK(name string) string       { return "K" + name }
func pendingEntry(v int64, n string) string { return strconv.FormatInt(v, 10) + ":" + n }

// parseGate reads the head's gate attributes; nil when it has none.
func parseGate(item map[string]types.AttributeValue) *store.Gate {
	fence, okF := getN(item, hFence)
	token, okT := getN(item, hToken)
	ss, okP := item[hPending].(*types.AttributeValueMemberSS)
	if !okF && !okT && !okP {
		return nil
	}
	g := &store.Gate{WriterFence: fence, Token: token}
	if okP {
		for _, e := range ss.Value {
			vs, name, ok := strings.Cut(e, ":")
			v, err := strconv.ParseInt(vs, 10, 64)
			if ok && err == nil {
				g.Pending = append(g.Pending, store.PendingCheckpoint{Name: name, SchemaVersion: v})
			}
		}
		sort.Slice(g.Pending, func(i, j int) bool { return g.Pending[i].Name < g.Pending[j].Name })
	}
	return g
}

func withMarker(g *store.Gate, marker int64) *store.Gate {
	if marker == 0 {
		return g
	}
	if g == nil {
		g = &store.Gate{}
	}
	g.StoredSchema = marker
	return g
}

// DefaultMarkerTTL is how long a Store serves the schema marker from its
// cache (Options.MarkerTTL).
const DefaultMarkerTTL = 5 * time.Second

// markerCache is a Store's copy of the schema marker (issue 20: no item
// is read by every request of every tenant). One request per TTL reads
// the marker item again, riding on the BatchGetItem it makes anyway;
// the others use the copy. The marker only rises, so the copy keeps the
// highest value seen, from a read or from this Store's own bump.
//
// Why a stale copy is safe (the argument doc.go repeats):
//
//   - No write depends on the marker. A commit or rejected outcome is
//     stopped by its partition's writer fence (rwv), a head attribute
//     checked by the write's own condition (commitCondition). The fence
//     rises per partition with the newer build's first write it needs
//     (store.CommitRequest.RaiseFence) or a checkpoint declaration;
//     a partition created after the bump starts at the marker, which
//     creation reads fresh and pins with a ConditionCheck in the creating
//     transaction. So a writer of an old build never commits past a fence
//     raised for its partition, whatever marker it has cached.
//   - The gate's partition part (fence, pending checkpoints, token) is
//     read consistently from the head by every request, at entry and
//     after the response is built: once a partition is fenced or
//     declares a checkpoint, every build refuses or serves it exactly as
//     before.
//   - The marker refuses nothing by itself (engine gateRefusal): what
//     the copy delays is only the fence a partition created by this
//     Store starts at, by at most one TTL after a bump, and creation
//     reads the marker fresh anyway.
//
// Age is measured on the monotonic clock and, as well, on the wall clock
// (whichever says the copy is older wins), so an instance whose
// monotonic clock stood still while its environment was frozen between
// invocations still reads the marker again once a TTL passed.
type markerCache struct {
	ttl  int64 // ns; negative: read the marker on every request
	base time.Time
	v    atomic.Int64
	// level is the store-format level (fl) of the same item
	// (formats.go): it rides on every read of the marker.
	level   atomic.Int64
	decl    atomic.Pointer[store.TableDeclaration] // the newest declaration seen
	due     atomic.Int64                           // ns since base when the next read includes the marker
	dueWall atomic.Int64                           // the same deadline in Unix ns (wall clock)
}

func (c *markerCache) init(ttl time.Duration) {
	c.base = time.Now()
	c.ttl = int64(ttl)
	if ttl == 0 {
		c.ttl = int64(DefaultMarkerTTL)
	}
}

// claim reports whether the caller's read includes the marker item: when
// the copy is older than the TTL, and then for one caller only.
func (c *markerCache) claim() bool {
	if c.ttl < 0 {
		return true
	}
	now, wall := int64(time.Since(c.base)), time.Now().UnixNano()
	d := c.due.Load()
	if now < d && wall < c.dueWall.Load() {
		return false
	}
	if !c.due.CompareAndSwap(d, now+c.ttl) {
		return false // another request claimed this refresh
	}
	c.dueWall.Store(wall + c.ttl)
	return true
}

// release lets the next request read the marker after a claimed read
// failed.
func (c *markerCache) release() {
	c.due.Store(0)
	c.dueWall.Store(0)
}

// seen raises the copy to v.
func (c *markerCache) seen(v int64) { raiseTo(&c.v, v) }

func raiseTo(a *atomic.Int64, v int64) {
	for {
		o := a.Load()
		if v <= o || a.CompareAndSwap(o, v) {
			return
		}
	}
}

// seenItem raises the copy to what a marker item holds: its version,
// store-format level and checkpoint declaration (nil: the item does not
// exist yet).
func (c *markerCache) seenItem(item map[string]types.AttributeValue) {
	v, _ := getN(item, mVersion)
	l, _ := getN(item, mFormatLevel)
	c.seen(v)
	raiseTo(&c.level, l)
	if d := parseDecl(item); d != nil {
		c.seenDecl(d)
	}
}

// seenDecl raises the copy's declaration to d (declarations only rise).
func (c *markerCache) seenDecl(d *store.TableDeclaration) {
	for {
		o := c.decl.Load()
		if o.Gen() >= d.Generation || c.decl.CompareAndSwap(o, d) {
			return
		}
	}
}

// parseDecl reads the marker item's declaration; nil when it has none.
func parseDecl(item map[string]types.AttributeValue) *store.TableDeclaration {
	dv, okV := getN(item, mDeclV)
	dg, okG := getN(item, mDeclGen)
	l, isL := item[mDecls].(*types.AttributeValueMemberL)
	if !okV || !okG || !isL {
		return nil
	}
	d := &store.TableDeclaration{Version: dv, Generation: dg}
	for _, e := range l.Value {
		parts, isL := e.(*types.AttributeValueMemberL)
		if !isL || len(parts.Value) == 0 {
			continue
		}
		var strs []string
		for _, v := range parts.Value {
			if sv, isS := v.(*types.AttributeValueMemberS); isS {
				strs = append(strs, sv.Value)
			}
		}
		if len(strs) == len(parts.Value) {
			d.Checkpoints = append(d.Checkpoints, store.CheckpointDecl{Name: strs[0], Sources: strs[1:]})
		}
	}
	return d
}

// declValue encodes decls as the marker's dc attribute.
func declValue(decls []store.CheckpointDecl) types.AttributeValue {
	out := make([]types.AttributeValue, len(decls))
	for i, d := range decls {
		parts := []types.AttributeValue{S(d.Name)}
		for _, t := range d.Sources {
			parts = append(parts, S(t))
		}
		out[i] = &types.AttributeValueMemberL{Value: parts}
	}
	return &types.AttributeValueMemberL{Value: out}
}

// lazyGate adds to h's gate the table-wide declaration of the Store's
// marker copy while the partition has not materialised it: its
// checkpoints pend there as declared ones do (store.Gate.Unmaterialized).
func (s *Store) lazyGate(h *head) {
	h.Gate = s.marker.decl.Load().Lazy(h.Gate, h.materialized)
}

// readHeadMarkerRows reads the head and the row items of rowKeys (at
// most batchGetMax−2 keys of one table) in one consistent BatchGetItem,
// with the schema marker item when the cached copy is due (fresh).
// marker is the value read, else the cached copy.
func (s *Store) readHeadMarkerRows(ctx context.Context, p string, rowKeys []map[string]types.AttributeValue) (h head, ok bool, marker int64, fresh bool, rows []*store.Row, err error) {
	fresh = s.marker.claim()
	keys := make([]map[string]types.AttributeValue, 0, 2+len(rowKeys))
	keys = append(keys, Key(headPK(p), headSK))
	if fresh {
		keys = append(keys, Key(markerPK, markerSK))
	}
	keys = append(keys, rowKeys...)
	items, err := s.batchGet(ctx, "read partition head", keys)
	if err != nil {
		if fresh {
			s.marker.release()
		}
		return head{}, false, 0, false, nil, err
	}
	for _, it := range items {
		pk, _ := getS(it, AttrPK)
		sk, _ := getS(it, AttrSK)
		switch {
		case pk == markerPK:
			s.marker.seenItem(it)
		case sk == headSK && pk == headPK(p):
			if h, err = parseHead(it); err != nil {
				return head{}, false, 0, false, nil, err
			}
			s.noteIndex(p, h)
			s.noteHeadItem(p, it)
			ok = true
		default:
			r, err := parseRow(it)
			if err != nil {
				return head{}, false, 0, false, nil, err
			}
			rows = append(rows, r)
		}
	}
	if ok {
		s.lazyGate(&h) // after the marker item, whichever came first
	}
	return h, ok, s.marker.v.Load(), fresh, rows, nil
}

// ReadGate implements store.SchemaStore.
func (s *Store) ReadGate(ctx context.Context, partition string) (store.Gate, error) {
	if err := checkPartition(partition); err != nil {
		return store.Gate{}, err
	}
	h, _, marker, _, _, err := s.readHeadMarkerRows(ctx, partition, nil)
	if err != nil {
		return store.Gate{}, err
	}
	if g := withMarker(h.Gate, marker); g != nil {
		return *g, nil
	}
	return store.Gate{}, nil
}

// SchemaMarker implements store.SchemaStore: always read from the table
// (consistent), never from the cache, which it refreshes.
func (s *Store) SchemaMarker(ctx context.Context) (int64, error) {
	return s.readMarker(ctx, "read schema marker", mVersion)
}

// readMarker reads the marker item consistently, refreshes the cached
// copy with it and returns its attribute attr (0 when absent).
func (s *Store) readMarker(ctx context.Context, op, attr string) (int64, error) {
	item, err := s.getItem(ctx, op, markerPK, markerSK, nil)
	if err != nil {
		return 0, err
	}
	s.marker.seenItem(item)
	v, _ := getN(item, attr)
	return v, nil
}

// DeclareCheckpoints implements store.SchemaStore: a consistent read of
// the marker item, then (unless it holds this declaration already) one
// conditional update of it that sets the marker, the declaration and the
// next generation together, so neither is ever visible without the
// other; the condition pins the generation read.
func (s *Store) DeclareCheckpoints(ctx context.Context, version int64, decls []store.CheckpointDecl) (int64, error) {
	for _, d := range decls {
		if err := checkName("checkpoint", d.Name); err != nil {
			return 0, err
		}
	}
	for range 8 {
		item, err := s.getItem(ctx, "read schema marker", markerPK, markerSK, nil)
		if err != nil {
			return 0, err
		}
		s.marker.seenItem(item)
		m, _ := getN(item, mVersion)
		if m > version {
			return m, nil
		}
		old := parseDecl(item)
		switch {
		case old != nil && old.Version > version:
			return m, fmt.Errorf("dynamostore: checkpoints of version %d are declared: %w", old.Version, store.ErrNewerDeclaration)
		case old.Declares(version, decls):
			return s.BumpSchemaMarker(ctx, version)
		}
		cond, vals := "(attribute_not_exists(v) OR v <= :v) AND attribute_not_exists(dg)", map[string]types.AttributeValue{
			":v": N(version), ":dc": declValue(decls), ":g": N(old.Gen() + 1),
		}
		if old != nil {
			cond, vals[":og"] = "(attribute_not_exists(v) OR v <= :v) AND dg = :og", N(old.Generation)
		}
		item, err = s.updateItem(ctx, "declare checkpoints", &dynamodb.UpdateItemInput{
			Key:                       Key(markerPK, markerSK),
			UpdateExpression:          aws.String("SET v = :v, dv = :v, dg = :g, dc = :dc"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeValues: vals,
			ReturnValues:              types.ReturnValueAllNew,
		})
		if isConditionFailed(err) {
			continue // another declaration or bump landed: read again
		}
		if err != nil {
			return 0, err
		}
		s.marker.seenItem(item)
		return version, nil
	}
	return 0, errors.New("dynamostore: checkpoint declaration kept racing")
}

// MaterializeCheckpoints implements store.SchemaStore: one consistent
// BatchGetItem of the head, the marker and the checkpoint items the
// Store's copy of the declaration names, then (unless materialised) one
// transaction: absent checkpoints put as declared, existing ones pinned
// by a ConditionCheck on the state read, and the head's fence, pending
// set, token and ckd, conditioned on ckd still below the generation. A
// race reads again.
func (s *Store) MaterializeCheckpoints(ctx context.Context, partition string, nowMs int64) (store.Head, error) {
	if err := checkPartition(partition); err != nil {
		return store.Head{}, err
	}
	for range 8 {
		keys := []map[string]types.AttributeValue{Key(headPK(partition), headSK), Key(markerPK, markerSK)}
		guess := s.marker.decl.Load()
		if guess != nil {
			for _, c := range guess.Checkpoints {
				keys = append(keys, Key(checkpointPK(partition), checkpointSK(c.Name)))
			}
		}
		h, ok, marker, found, err := s.readMaterializeKeys(ctx, keys)
		if err != nil {
			return store.Head{}, err
		}
		if !ok {
			return store.Head{}, ErrUnknownPartition
		}
		d := parseDecl(marker)
		if d != nil {
			s.marker.seenItem(marker)
		}
		if d.Gen() <= h.materialized {
			g := gateValue(h.Gate)
			h.Gate = &g
			return h.Head, nil
		}
		if guess.Gen() != d.Generation {
			continue // the copy named other checkpoints: read them
		}
		g := gateValue(h.Gate)
		acts, add := s.materializeActs(partition, d, found, nowMs)
		acts = append(acts, s.materializeHeadAct(partition, d, &g, add))
		err = s.transact(ctx, "materialize checkpoints", acts)
		if codes, _ := cancelReasons(err); codes != nil {
			continue // raced a declaration, a fence, an activation or another materialisation
		}
		if err != nil {
			return store.Head{}, wrap("materialize checkpoints", err)
		}
		g.Token++
		sort.Slice(g.Pending, func(i, j int) bool { return g.Pending[i].Name < g.Pending[j].Name })
		h.Gate = &g
		return h.Head, nil
	}
	return store.Head{}, errors.New("dynamostore: checkpoint materialisation kept racing")
}

// readMaterializeKeys reads keys (the head, the marker item and the
// checkpoint items MaterializeCheckpoints guessed) in one consistent
// BatchGetItem: the head (ok: it exists), the marker item and the
// checkpoint items found, by sort key.
func (s *Store) readMaterializeKeys(ctx context.Context, keys []map[string]types.AttributeValue) (h head, ok bool, marker map[string]types.AttributeValue, found map[string]map[string]types.AttributeValue, err error) {
	items, err := s.batchGet(ctx, "read head, marker and checkpoints", keys)
	if err != nil {
		return head{}, false, nil, nil, err
	}
	found = map[string]map[string]types.AttributeValue{}
	for _, it := range items {
		pk, _ := getS(it, AttrPK)
		sk, _ := getS(it, AttrSK)
		switch {
		case pk == markerPK:
			marker = it
		case sk == headSK:
			if h, err = parseHead(it); err != nil {
				return head{}, false, nil, nil, err
			}
			ok = true
		default:
			found[sk] = it
		}
	}
	return h, ok, marker, found, nil
}

// materializeHeadAct is the head update of materialising declaration d in
// partition p: the declaration's generation recorded (once), the writer
// fence raised to d's version when below it, the gate token moved, and
// add joined to the pending set; g, the gate read, is updated to match.
func (s *Store) materializeHeadAct(p string, d *store.TableDeclaration, g *store.Gate, add []store.PendingCheckpoint) txItem {
	vals := map[string]types.AttributeValue{":v": N(d.Version), ":g": N(d.Generation), ":one": N(1)}
	update, cond := "SET ckd = :g", "attribute_exists(pk) AND (attribute_not_exists(ckd) OR ckd < :g) AND "
	if g.WriterFence < d.Version {
		update += ", rwv = :v"
		cond += "(attribute_not_exists(rwv) OR rwv < :v)"
		g.WriterFence = d.Version
	} else {
		cond += "rwv >= :v"
	}
	update += " ADD gt :one"
	if len(add) > 0 {
		update += ", pcs :p"
		ss := make([]string, len(add))
		for i, c := range add {
			ss[i] = pendingEntry(c.SchemaVersion, c.Name)
			if !slices.Contains(g.Pending, c) {
				g.Pending = append(g.Pending, c)
			}
		}
		vals[":p"] = &types.AttributeValueMemberSS{Value: ss}
	}
	return txItem{size: 200, w: types.TransactWriteItem{Update: &types.Update{
		TableName: s.table, Key: Key(headPK(p), headSK),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
	}}}
}

// materializeActs are the checkpoint actions of materialising d in
// partition p, and the checkpoints it adds to the pending set.
func (s *Store) materializeActs(p string, d *store.TableDeclaration, found map[string]map[string]types.AttributeValue, nowMs int64) ([]txItem, []store.PendingCheckpoint) {
	var (
		acts []txItem
		add  []store.PendingCheckpoint
	)
	for _, c := range d.Checkpoints {
		old := found[checkpointSK(c.Name)]
		if old == nil {
			item := checkpointItem(p, c.Name, d.Version, c.Sources, nowMs)
			acts = append(acts, txItem{size: ItemSize(item), w: types.TransactWriteItem{Put: &types.Put{
				TableName: s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}}})
			add = append(add, store.PendingCheckpoint{Name: c.Name, SchemaVersion: d.Version})
			continue
		}
		// Declared before (per partition): left as it is, pending unless
		// activated, pinned so an activation in between reads again.
		st, _ := getS(old, kState)
		sv, _ := getN(old, kVersion)
		acts = append(acts, txItem{size: 100, w: types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName: s.table, Key: Key(checkpointPK(p), checkpointSK(c.Name)),
			ConditionExpression:       aws.String("st = :st"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":st": S(st)},
		}}})
		if st != string(store.CheckpointActivated) {
			add = append(add, store.PendingCheckpoint{Name: c.Name, SchemaVersion: sv})
		}
	}
	return acts, add
}

// checkpointItem is a newly declared checkpoint's item.
func checkpointItem(p, name string, version int64, sources []string, nowMs int64) map[string]types.AttributeValue {
	item := Key(checkpointPK(p), checkpointSK(name))
	src := make([]types.AttributeValue, len(sources))
	for i, t := range sources {
		src[i] = S(t)
	}
	item[kVersion], item[kState], item[kSources] = N(version), S(string(store.CheckpointDeclared)), &types.AttributeValueMemberL{Value: src}
	item[kWater], item[kCursor], item[kEpoch], item[kObserved], item[kUpdated] = N(0), S(""), N(0), N(0), N(nowMs)
	return item
}

func gateValue(g *store.Gate) store.Gate {
	if g == nil {
		return store.Gate{}
	}
	c := *g
	c.Pending = slices.Clone(g.Pending)
	return c
}

// BumpSchemaMarker implements store.SchemaStore: one conditional update
// that only ever raises v.
func (s *Store) BumpSchemaMarker(ctx context.Context, v int64) (int64, error) {
	return s.raiseMarker(ctx, "bump schema marker", mVersion, v)
}

// raiseMarker sets the marker item's attribute attr to v unless it is at
// or above v already (one conditional update, never lowering it) and
// returns the stored value; the cached copy takes the item either way.
func (s *Store) raiseMarker(ctx context.Context, op, attr string, v int64) (int64, error) {
	item, err := s.updateItem(ctx, op, &dynamodb.UpdateItemInput{
		Key:                       Key(markerPK, markerSK),
		UpdateExpression:          aws.String("SET #a = :v"),
		ConditionExpression:       aws.String("attribute_not_exists(#a) OR #a < :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": N(v)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		item, err = conditionItem(err), nil
	}
	if err != nil {
		return 0, err
	}
	s.marker.seenItem(item)
	got, _ := getN(item, attr)
	return got, nil
}

// RaiseWriterFence implements store.SchemaStore.
func (s *Store) RaiseWriterFence(ctx context.Context, partition string, v int64) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	_, err := s.updateItem(ctx, "raise writer fence", &dynamodb.UpdateItemInput{
		Key:                       Key(headPK(partition), headSK),
		UpdateExpression:          aws.String("SET rwv = :v ADD gt :one"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND (attribute_not_exists(rwv) OR rwv < :v)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": N(v), ":one": N(1)},
	})
	if isConditionFailed(err) {
		if conditionItem(err) == nil {
			return ErrUnknownPartition
		}
		return nil // already at or above v
	}
	return err
}

func parseCheckpoint(item map[string]types.AttributeValue) (*store.Checkpoint, error) {
	sk, ok0 := getS(item, AttrSK)
	c := &store.Checkpoint{}
	var ok [7]bool
	c.SchemaVersion, ok[0] = getN(item, kVersion)
	var st string
	st, ok[1] = getS(item, kState)
	c.State = store.CheckpointState(st)
	c.Watermark, ok[2] = getN(item, kWater)
	c.Cursor, ok[3] = getS(item, kCursor)
	c.OwnerEpoch, ok[4] = getN(item, kEpoch)
	c.ObservedRows, ok[5] = getN(item, kObserved)
	c.UpdatedAtMs, ok[6] = getN(item, kUpdated)
	if !ok0 || len(sk) < 1 || slices.Contains(ok[:], false) {
		return nil, fmt.Errorf("dynamostore: checkpoint item is malformed: %w", errCorrupt)
	}
	c.Name = sk[1:]
	if l, isL := item[kSources].(*types.AttributeValueMemberL); isL {
		for _, v := range l.Value {
			if sv, isS := v.(*types.AttributeValueMemberS); isS {
				c.Sources = append(c.Sources, sv.Value)
			}
		}
	}
	return c, nil
}

// GetCheckpoint implements store.SchemaStore.
func (s *Store) GetCheckpoint(ctx context.Context, partition, name string) (*store.Checkpoint, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	item, err := s.getItem(ctx, "read checkpoint", checkpointPK(partition), checkpointSK(name), nil)
	if err != nil || item == nil {
		return nil, err
	}
	return parseCheckpoint(item)
}

// DeclareCheckpoint implements store.SchemaStore: one transaction puts
// the checkpoint (if absent), adds it to the head's pending set, raises
// the fence and, unless the marker is known to be there already, raises
// the schema marker to the version; the head condition pins what was
// read, so a concurrent change retries.
func (s *Store) DeclareCheckpoint(ctx context.Context, partition, name string, version int64, sources []string, nowMs int64) (*store.Checkpoint, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if err := checkName("checkpoint", name); err != nil {
		return nil, err
	}
	for range 8 {
		existing, err := s.GetCheckpoint(ctx, partition, name)
		if err != nil {
			return nil, err
		}
		if existing != nil {
			if err := s.RaiseWriterFence(ctx, partition, version); err != nil {
				return nil, err
			}
			return existing, nil
		}
		h, ok, err := s.readHead(ctx, partition)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, ErrUnknownPartition
		}
		item := checkpointItem(partition, name, version, sources, nowMs)
		vals := map[string]types.AttributeValue{
			":p": &types.AttributeValueMemberSS{Value: []string{pendingEntry(version, name)}}, ":one": N(1), ":v": N(version),
		}
		update, cond := "ADD pcs :p, gt :one", "attribute_exists(pk) AND "
		if fence := fenceOf(h.Gate); fence < version {
			update = "SET rwv = :v " + update
			cond += "(attribute_not_exists(rwv) OR rwv < :v)"
		} else {
			cond += "rwv >= :v"
		}
		acts := []txItem{
			{size: ItemSize(item), w: types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}}},
			{size: 200, w: types.TransactWriteItem{Update: &types.Update{
				TableName: s.table, Key: Key(headPK(partition), headSK),
				UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
			}}},
		}
		if s.marker.v.Load() < version {
			// Declared with the marker bump (issue 20): the marker reaches
			// the version in the same transaction. The marker only rises,
			// so once a copy shows it there, no action is needed (and none
			// shared by every partition's declaration conflicts).
			acts = append(acts, txItem{size: 100, w: types.TransactWriteItem{Update: &types.Update{
				TableName: s.table, Key: Key(markerPK, markerSK),
				UpdateExpression:          aws.String("SET v = :v"),
				ConditionExpression:       aws.String("attribute_not_exists(v) OR v <= :v"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":v": N(version)},
			}}})
		}
		err = s.transact(ctx, "declare checkpoint", acts)
		if codes, _ := cancelReasons(err); codes != nil {
			if len(codes) > 2 && codes[2] == "ConditionalCheckFailed" {
				if _, err := s.SchemaMarker(ctx); err != nil { // newer than version: no action next time
					return nil, err
				}
			}
			continue // raced a declare, a fence change or the marker: read again
		}
		if len(acts) > 2 {
			s.marker.seen(version)
		}
		if err != nil {
			return nil, wrap("declare checkpoint", err)
		}
		c, err := parseCheckpoint(item)
		return c, err
	}
	return nil, errors.New("dynamostore: checkpoint declaration kept racing")
}

func fenceOf(g *store.Gate) int64 {
	if g == nil {
		return 0
	}
	return g.WriterFence
}

// ClaimCheckpoint implements store.SchemaStore: one conditional update
// (ADD oe 1), so concurrent claims get distinct epochs.
func (s *Store) ClaimCheckpoint(ctx context.Context, partition, name string, nowMs int64) (*store.Checkpoint, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	item, err := s.updateItem(ctx, "claim checkpoint", &dynamodb.UpdateItemInput{
		Key:                       Key(checkpointPK(partition), checkpointSK(name)),
		UpdateExpression:          aws.String("SET st = :b, upd = :now ADD oe :one"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND st <> :act"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": S(string(store.CheckpointBackfilling)), ":act": S(string(store.CheckpointActivated)), ":now": N(nowMs), ":one": N(1)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		if conditionItem(err) == nil {
			return nil, store.ErrNotFound
		}
		return nil, store.ErrCheckpointActivated
	}
	if err != nil {
		return nil, err
	}
	return parseCheckpoint(item)
}

// advanceUpdate is the checkpoint Update of an advance, alone or inside
// a commit transaction.
func (s *Store) advanceUpdate(p string, a *store.CheckpointAdvance, nowMs int64) *types.Update {
	return &types.Update{
		TableName:           s.table,
		Key:                 Key(checkpointPK(p), checkpointSK(a.Name)),
		UpdateExpression:    aws.String("SET wm = :wm, cur = :cur, upd = :now ADD obs :obs"),
		ConditionExpression: aws.String("oe = :e AND st <> :act"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":wm": N(a.Watermark), ":cur": S(a.Cursor), ":now": N(nowMs), ":obs": N(a.Observed),
			":e": N(a.Epoch), ":act": S(string(store.CheckpointActivated)),
		},
	}
}

// AdvanceCheckpoint implements store.SchemaStore.
func (s *Store) AdvanceCheckpoint(ctx context.Context, partition string, a store.CheckpointAdvance, nowMs int64) (bool, error) {
	if err := checkPartition(partition); err != nil {
		return false, err
	}
	u := s.advanceUpdate(partition, &a, nowMs)
	if a.Activate {
		return s.advanceActivate(ctx, partition, &a, u)
	}
	_, err := s.updateItem(ctx, "advance checkpoint", &dynamodb.UpdateItemInput{
		Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, err
}

// advanceActivate is an advance that activates (store.CheckpointAdvance.
// Activate): one transaction of the checkpoint's advance, now also
// setting the activated state, and the head's pending-set removal,
// conditioned on the head still at the watermark (no commit since the
// caller caught up), the fence at the checkpoint's version and the
// horizon at or below the watermark. Either condition failing is false.
func (s *Store) advanceActivate(ctx context.Context, partition string, a *store.CheckpointAdvance, u *types.Update) (bool, error) {
	u.UpdateExpression = aws.String(strings.Replace(aws.ToString(u.UpdateExpression), "SET ", "SET st = :act, ", 1))
	err := s.transact(ctx, "activate checkpoint", []txItem{
		{size: 200, w: types.TransactWriteItem{Update: u}},
		{size: 200, w: types.TransactWriteItem{Update: &types.Update{
			TableName: s.table, Key: Key(headPK(partition), headSK),
			UpdateExpression:    aws.String("DELETE pcs :p ADD gt :one"),
			ConditionExpression: aws.String("mx = :wm AND hz <= :wm AND rwv >= :sv"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":p": &types.AttributeValueMemberSS{Value: []string{pendingEntry(a.SchemaVersion, a.Name)}}, ":one": N(1),
				":wm": N(a.Watermark), ":sv": N(a.SchemaVersion),
			},
		}}},
	})
	if codes, _ := cancelReasons(err); codes != nil {
		return false, nil // superseded, activated, or the head moved
	}
	if err != nil {
		return false, wrap("activate checkpoint", err)
	}
	return true, nil
}

// ActivateCheckpoint implements store.SchemaStore: read the checkpoint
// and the head, scan the log above the watermark for source tables, then
// one transaction activates it while the head is still where it was read
// (a commit landing in between makes it read again: catch up, retry).
func (s *Store) ActivateCheckpoint(ctx context.Context, partition, name string, epoch, nowMs int64) (store.ActivationOutcome, error) {
	if err := checkPartition(partition); err != nil {
		return "", err
	}
	for range 16 {
		c, err := s.GetCheckpoint(ctx, partition, name)
		if err != nil {
			return "", err
		}
		if c == nil {
			return "", store.ErrNotFound
		}
		h, ok, err := s.readHead(ctx, partition)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", store.ErrNotFound
		}
		if fenceOf(h.Gate) < c.SchemaVersion {
			return "", store.ErrFenceMissing
		}
		changed := false
		err = s.ReadLog(ctx, partition, c.Watermark, h.MaxCommitSeq, func(cm *store.Commit) bool {
			for _, ch := range cm.Changes {
				if slices.Contains(c.Sources, ch.Table) {
					changed = true
					return false
				}
			}
			return true
		})
		if err != nil {
			return "", err
		}
		switch {
		case changed:
			return store.Stale, nil
		case h.HorizonSeq > c.Watermark:
			return store.Unverifiable, nil
		case c.OwnerEpoch != epoch || c.State == store.CheckpointActivated:
			return store.Stale, nil
		}
		err = s.transact(ctx, "activate checkpoint", []txItem{
			{size: 200, w: types.TransactWriteItem{Update: &types.Update{
				TableName: s.table, Key: Key(headPK(partition), headSK),
				UpdateExpression:    aws.String("DELETE pcs :p ADD gt :one"),
				ConditionExpression: aws.String("mx = :mx AND hz = :hz"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":p": &types.AttributeValueMemberSS{Value: []string{pendingEntry(c.SchemaVersion, name)}}, ":one": N(1),
					":mx": N(h.MaxCommitSeq), ":hz": N(h.HorizonSeq),
				},
			}}},
			{size: 200, w: types.TransactWriteItem{Update: &types.Update{
				TableName: s.table, Key: Key(checkpointPK(partition), checkpointSK(name)),
				UpdateExpression:    aws.String("SET st = :act, upd = :now"),
				ConditionExpression: aws.String("oe = :e AND st <> :act"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":act": S(string(store.CheckpointActivated)), ":now": N(nowMs), ":e": N(epoch),
				},
			}}},
		})
		codes, _ := cancelReasons(err)
		switch {
		case err == nil:
			return store.Activated, nil
		case len(codes) == 2 && codes[1] == "ConditionalCheckFailed":
			return store.Stale, nil // superseded or activated meanwhile
		case codes != nil:
			continue // the head moved: check the new commits too
		}
		return "", wrap("activate checkpoint", err)
	}
	return store.Stale, nil
}
