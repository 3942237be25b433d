package costmodel

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync"
)

// DynamoMeter is an HTTP client for the DynamoDB SDK client that counts
// the requests it carries and computes the read and write request units
// each consumes by the AWS rules, from the sizes of the items the call
// touches; DynamoDB Local's own ConsumedCapacity under-reports (about 2
// units per transaction instead of 2 per item, nothing for a missing key
// or an empty Query). The rules:
//
//   - reads in 4 KB units, each item read by key rounded up on its own,
//     the items a Query or Scan evaluates (before any filter or
//     projection) summed and then rounded up; a missing key or an empty
//     Query still costs one unit; eventually consistent reads half;
//   - writes in 1 KB units of the larger of the item before and after
//     (a delete: the item deleted), at least one unit;
//   - in TransactWriteItems every action twice: Put, Update and Delete as
//     writes, ConditionCheck as a read of its item;
//   - a write whose condition failed is charged as if it ran.
//
// To know the sizes it does not see (an item a write replaces or
// updates, the full items behind a projection or a filter) it sends extra
// reads to the same endpoint; those are not counted.
type DynamoMeter struct {
	Inner interface {
		Do(*http.Request) (*http.Response, error)
	}
	mu    sync.Mutex
	usage DynamoUsage
	// Keys names the key attributes of the tables (pk, sk).
	Keys []string
	// Trace, when set, receives every metered call.
	Trace func(op string, rru, wru float64)
	// passive: calls are forwarded and counted only, without the reads
	// and parsing metering adds (SetPassive).
	passive bool
}

// SetPassive switches metering off (true) or on: a passive meter
// forwards each call as it is and counts it, computing no units. Its
// extra reads (the sizes before a write) and JSON parsing are work of
// the measurement, not of the function, and would lengthen a timed
// invocation by a round trip per write; durations are therefore taken
// from passive runs, units from metered ones.
func (m *DynamoMeter) SetPassive(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.passive = on
}

// DynamoUsage is what the calls since the last Take consumed.
type DynamoUsage struct {
	Calls    int
	RRU, WRU float64
}

// Take returns the usage so far and resets it.
func (m *DynamoMeter) Take() DynamoUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.usage
	m.usage = DynamoUsage{}
	return u
}

const targetPrefix = "DynamoDB_20120810."

// Do forwards req and meters it.
func (m *DynamoMeter) Do(req *http.Request) (*http.Response, error) {
	op, ok := strings.CutPrefix(req.Header.Get("X-Amz-Target"), targetPrefix)
	if !ok || req.Body == nil {
		return m.Inner.Do(req)
	}
	m.mu.Lock()
	passive := m.passive
	m.mu.Unlock()
	if passive {
		resp, err := m.Inner.Do(req)
		m.mu.Lock()
		m.usage.Calls++
		m.mu.Unlock()
		return resp, err
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("costmodel: reading a DynamoDB request: %w", err)
	}
	req.Body.Close()
	peek := &peeker{m: m, proto: req}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("costmodel: DynamoDB %s request: %w", op, err)
	}
	var before map[string]int
	if isWrite(op) {
		before, err = peek.sizesBefore(op, in)
		if err != nil {
			return nil, err
		}
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	resp, err := m.Inner.Do(req)
	if err != nil {
		return resp, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("costmodel: reading a DynamoDB response: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	var rru, wru float64
	if charged(resp.StatusCode, out) {
		var res map[string]json.RawMessage
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(out, &res); err != nil {
				return nil, fmt.Errorf("costmodel: DynamoDB %s response: %w", op, err)
			}
		}
		rru, wru, err = peek.units(op, in, res, before)
		if err != nil {
			return nil, fmt.Errorf("costmodel: DynamoDB %s: %w", op, err)
		}
	}
	if m.Trace != nil {
		m.Trace(op, rru, wru)
	}
	m.mu.Lock()
	m.usage.Calls++
	m.usage.RRU += rru
	m.usage.WRU += wru
	m.mu.Unlock()
	return resp, nil
}

func isWrite(op string) bool {
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems":
		return true
	}
	return false
}

// charged: a call that ran (200) or whose condition failed consumes
// capacity; a throttled, invalid or failed one does not.
func charged(status int, out []byte) bool {
	if status == http.StatusOK {
		return true
	}
	return bytes.Contains(out, []byte("ConditionalCheckFailed")) || bytes.Contains(out, []byte("TransactionCanceled"))
}

// peeker sends the meter's own reads, with the headers of the request
// being metered.
type peeker struct {
	m     *DynamoMeter
	proto *http.Request
}

func (p *peeker) call(op string, in any) (map[string]json.RawMessage, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(p.proto.Context(), http.MethodPost, p.proto.URL.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = p.proto.Header.Clone()
	req.Header.Set("X-Amz-Target", targetPrefix+op)
	req.Header.Del("Content-Length")
	req.Header.Del("Amz-Sdk-Invocation-Id")
	resp, err := p.m.Inner.Do(req)
	if err != nil {
		return nil, fmt.Errorf("costmodel: %s for sizes: %w", op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("costmodel: %s for sizes: HTTP %d %s", op, resp.StatusCode, b)
	}
	var out map[string]json.RawMessage
	return out, json.Unmarshal(b, &out)
}

// itemSize reads the current size of the item at key (0: absent).
func (p *peeker) itemSize(table, key json.RawMessage) (int, error) {
	out, err := p.call("GetItem", map[string]any{"TableName": table, "Key": key, "ConsistentRead": true})
	if err != nil {
		return 0, err
	}
	if len(out["Item"]) == 0 {
		return 0, nil
	}
	return ItemSize(out["Item"])
}

// keyOf is the key attributes of a written item.
func (p *peeker) keyOf(item json.RawMessage) (json.RawMessage, error) {
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(item, &attrs); err != nil {
		return nil, err
	}
	key := map[string]json.RawMessage{}
	for _, k := range p.m.Keys {
		if v, ok := attrs[k]; ok {
			key[k] = v
		}
	}
	return json.Marshal(key)
}

// write is one item a write call touches.
type write struct {
	table, key, item json.RawMessage // item: a Put's new item
	kind             string          // Put, Update, Delete, ConditionCheck
}

func (p *peeker) writes(op string, in map[string]json.RawMessage) ([]write, error) {
	var ws []write
	switch op {
	case "PutItem":
		key, err := p.keyOf(in["Item"])
		if err != nil {
			return nil, err
		}
		ws = append(ws, write{in["TableName"], key, in["Item"], "Put"})
	case "UpdateItem":
		ws = append(ws, write{in["TableName"], in["Key"], nil, "Update"})
	case "DeleteItem":
		ws = append(ws, write{in["TableName"], in["Key"], nil, "Delete"})
	case "BatchWriteItem":
		var items map[string][]struct {
			PutRequest    *struct{ Item json.RawMessage }
			DeleteRequest *struct{ Key json.RawMessage }
		}
		if err := json.Unmarshal(in["RequestItems"], &items); err != nil {
			return nil, err
		}
		for table, reqs := range items {
			t, _ := json.Marshal(table)
			for _, r := range reqs {
				switch {
				case r.PutRequest != nil:
					key, err := p.keyOf(r.PutRequest.Item)
					if err != nil {
						return nil, err
					}
					ws = append(ws, write{t, key, r.PutRequest.Item, "Put"})
				case r.DeleteRequest != nil:
					ws = append(ws, write{t, r.DeleteRequest.Key, nil, "Delete"})
				}
			}
		}
	case "TransactWriteItems":
		var items []map[string]struct {
			TableName json.RawMessage
			Key, Item json.RawMessage
		}
		if err := json.Unmarshal(in["TransactItems"], &items); err != nil {
			return nil, err
		}
		for _, it := range items {
			for kind, a := range it {
				key := a.Key
				if kind == "Put" {
					var err error
					if key, err = p.keyOf(a.Item); err != nil {
						return nil, err
					}
				}
				ws = append(ws, write{a.TableName, key, a.Item, kind})
			}
		}
	}
	return ws, nil
}

func (p *peeker) sizesBefore(op string, in map[string]json.RawMessage) (map[string]int, error) {
	ws, err := p.writes(op, in)
	if err != nil {
		return nil, err
	}
	sizes := map[string]int{}
	for _, w := range ws {
		n, err := p.itemSize(w.table, w.key)
		if err != nil {
			return nil, err
		}
		sizes[string(w.table)+string(w.key)] = n
	}
	return sizes, nil
}

func readUnits(size int, consistent bool) float64 {
	u := math.Max(1, math.Ceil(float64(size)/4096))
	if !consistent {
		u /= 2
	}
	return u
}

func writeUnits(size int) float64 { return math.Max(1, math.Ceil(float64(size)/1024)) }

// units are the read and write units one call consumed, by the AWS
// rules, from the sizes of the items it touched (before holds the sizes
// of the items a write replaced, read before the call).
func (p *peeker) units(op string, in, out map[string]json.RawMessage, before map[string]int) (rru, wru float64, err error) {
	switch op {
	case "GetItem":
		n := 0
		if len(out["Item"]) > 0 && len(in["ProjectionExpression"]) == 0 {
			n, err = ItemSize(out["Item"])
		} else if len(out["Item"]) > 0 {
			n, err = p.itemSize(in["TableName"], in["Key"])
		}
		return readUnits(n, consistentRead(in["ConsistentRead"])), 0, err
	case "BatchGetItem":
		return p.batchGetUnits(in, out)
	case "Query", "Scan":
		return p.queryUnits(op, in, out)
	case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems":
		return p.writeCallUnits(op, in, out, before)
	}
	return 0, 0, nil
}

// consistentRead reads a request's ConsistentRead flag.
func consistentRead(raw json.RawMessage) bool {
	var b bool
	_ = json.Unmarshal(raw, &b)
	return b
}

// batchGetUnits charges every processed key its item's full size (a
// projection does not lower it; a missing key is the minimum).
func (p *peeker) batchGetUnits(in, out map[string]json.RawMessage) (rru, wru float64, err error) {
	var reqs map[string]struct {
		Keys           []json.RawMessage
		ConsistentRead bool
	}
	var unprocessed map[string]struct{ Keys []json.RawMessage }
	if err := json.Unmarshal(in["RequestItems"], &reqs); err != nil {
		return 0, 0, err
	}
	if len(out["UnprocessedKeys"]) > 0 {
		if err := json.Unmarshal(out["UnprocessedKeys"], &unprocessed); err != nil {
			return 0, 0, err
		}
	}
	for table, r := range reqs {
		t, _ := json.Marshal(table)
		skip := map[string]bool{}
		for _, k := range unprocessed[table].Keys {
			skip[canonical(k)] = true
		}
		for _, k := range r.Keys {
			if skip[canonical(k)] {
				continue
			}
			// The item's full size (a projection does not lower it).
			n, err := p.itemSize(t, k)
			if err != nil {
				return 0, 0, err
			}
			rru += readUnits(n, r.ConsistentRead)
		}
	}
	return rru, 0, nil
}

// queryUnits charges the items a Query or Scan evaluated, in full, summed
// before rounding (one page).
func (p *peeker) queryUnits(op string, in, out map[string]json.RawMessage) (rru, wru float64, err error) {
	items := out["Items"]
	if len(in["ProjectionExpression"]) > 0 || len(in["FilterExpression"]) > 0 || len(in["Select"]) > 0 {
		// The items the call evaluated, in full: the same page
		// without the filter and the projection.
		full := map[string]json.RawMessage{}
		for k, v := range in {
			switch k {
			case "ProjectionExpression", "FilterExpression", "Select", "ReturnConsumedCapacity":
			default:
				full[k] = v
			}
		}
		pruneExpressionValues(full)
		res, err := p.call(op, full)
		if err != nil {
			return 0, 0, err
		}
		items = res["Items"]
	}
	var list []json.RawMessage
	if len(items) > 0 {
		if err := json.Unmarshal(items, &list); err != nil {
			return 0, 0, err
		}
	}
	total := 0
	for _, it := range list {
		n, err := ItemSize(it)
		if err != nil {
			return 0, 0, err
		}
		total += n
	}
	return readUnits(total, consistentRead(in["ConsistentRead"])), 0, nil
}

// writeCallUnits charges each write of a call the larger of the item
// before and after (×2 in a transaction); a condition check is a read.
func (p *peeker) writeCallUnits(op string, in, out map[string]json.RawMessage, before map[string]int) (rru, wru float64, err error) {
	ws, err := p.writes(op, in)
	if err != nil {
		return 0, 0, err
	}
	if op == "BatchWriteItem" && len(out["UnprocessedItems"]) > 2 {
		return 0, 0, fmt.Errorf("unprocessed items: metering them is not implemented")
	}
	factor := 1.0
	if op == "TransactWriteItems" {
		factor = 2
	}
	for _, w := range ws {
		old := before[string(w.table)+string(w.key)]
		switch w.kind {
		case "ConditionCheck":
			rru += factor * readUnits(old, true)
		case "Delete":
			wru += factor * writeUnits(old)
		case "Put":
			n, err := ItemSize(w.item)
			if err != nil {
				return 0, 0, err
			}
			wru += factor * writeUnits(max(old, n))
		case "Update":
			n, err := p.itemSize(w.table, w.key)
			if err != nil {
				return 0, 0, err
			}
			wru += factor * writeUnits(max(old, n))
		}
	}
	return rru, wru, nil
}

var exprRef = regexp.MustCompile(`[#:][A-Za-z0-9_]+`)

// pruneExpressionValues drops the expression attribute names and values
// no remaining expression uses (DynamoDB rejects unused ones).
func pruneExpressionValues(in map[string]json.RawMessage) {
	used := map[string]bool{}
	for _, k := range []string{"KeyConditionExpression", "ProjectionExpression", "FilterExpression", "ConditionExpression", "UpdateExpression"} {
		var e string
		if json.Unmarshal(in[k], &e) == nil {
			for _, r := range exprRef.FindAllString(e, -1) {
				used[r] = true
			}
		}
	}
	for _, k := range []string{"ExpressionAttributeNames", "ExpressionAttributeValues"} {
		var m map[string]json.RawMessage
		if json.Unmarshal(in[k], &m) != nil {
			continue
		}
		for name := range m {
			if !used[name] {
				delete(m, name)
			}
		}
		if len(m) == 0 {
			delete(in, k)
		} else {
			in[k], _ = json.Marshal(m)
		}
	}
}

// canonical is a key's JSON with sorted members (to compare keys).
func canonical(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v) // maps marshal sorted
	return string(b)
}

// ItemSize is the size DynamoDB bills for an item in its JSON wire form:
// each attribute's name plus its value (strings and binaries their
// bytes, numbers about one byte per two significant digits plus one,
// booleans and nulls one byte, lists and maps three bytes plus one per
// element and their elements, maps' keys included).
func ItemSize(raw json.RawMessage) (int, error) {
	var item map[string]json.RawMessage
	if err := json.Unmarshal(raw, &item); err != nil {
		return 0, fmt.Errorf("costmodel: item: %w", err)
	}
	n := 0
	for name, v := range item {
		s, err := valueSize(v)
		if err != nil {
			return 0, err
		}
		n += len(name) + s
	}
	return n, nil
}

func valueSize(raw json.RawMessage) (int, error) {
	var av map[string]json.RawMessage
	if err := json.Unmarshal(raw, &av); err != nil || len(av) != 1 {
		return 0, fmt.Errorf("costmodel: attribute value %s", raw)
	}
	for typ, v := range av {
		switch typ {
		case "S":
			var s string
			err := json.Unmarshal(v, &s)
			return len(s), err
		case "N":
			var s string
			err := json.Unmarshal(v, &s)
			return numberSize(s), err
		case "B":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return 0, err
			}
			b, err := base64.StdEncoding.DecodeString(s)
			return len(b), err
		case "BOOL", "NULL":
			return 1, nil
		case "SS", "NS", "BS":
			var ss []string
			if err := json.Unmarshal(v, &ss); err != nil {
				return 0, err
			}
			n := 0
			for _, s := range ss {
				switch typ {
				case "SS":
					n += len(s)
				case "NS":
					n += numberSize(s)
				default:
					b, err := base64.StdEncoding.DecodeString(s)
					if err != nil {
						return 0, err
					}
					n += len(b)
				}
			}
			return n, nil
		case "L":
			var l []json.RawMessage
			if err := json.Unmarshal(v, &l); err != nil {
				return 0, err
			}
			n := 3
			for _, e := range l {
				s, err := valueSize(e)
				if err != nil {
					return 0, err
				}
				n += 1 + s
			}
			return n, nil
		case "M":
			var m map[string]json.RawMessage
			if err := json.Unmarshal(v, &m); err != nil {
				return 0, err
			}
			n := 3
			for k, e := range m {
				s, err := valueSize(e)
				if err != nil {
					return 0, err
				}
				n += 1 + len(k) + s
			}
			return n, nil
		}
		return 0, fmt.Errorf("costmodel: attribute type %q", typ)
	}
	return 0, nil
}

// numberSize: significant digits (leading and trailing zeros trimmed),
// one byte per two, plus one.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "-+")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.Replace(s, ".", "", 1)
	s = strings.Trim(s, "0")
	if s == "" {
		return 1
	}
	return (len(s)+1)/2 + 1
}
