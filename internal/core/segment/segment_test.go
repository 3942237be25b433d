package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

var taskCols = []rowcodec.Column{
	{Name: "id", Type: rowcodec.TypeString},
	{Name: "title", Type: rowcodec.TypeString},
	{Name: "done", Type: rowcodec.TypeBoolean},
	{Name: "priority", Type: rowcodec.TypeInteger},
	{Name: "project_id", Type: rowcodec.TypeString},
	{Name: "updated_at", Type: rowcodec.TypeInteger},
	{Name: "notes", Type: rowcodec.TypeString, Nullable: true},
}

func taskRow(i int) []rowcodec.Value {
	notes := rowcodec.Value{Null: true}
	if i%3 == 0 {
		notes = rowcodec.Value{Str: fmt.Sprintf("note for task %d — ünïcode", i)}
	}
	return []rowcodec.Value{
		{Str: fmt.Sprintf("task-%08d", i)},
		{Str: fmt.Sprintf("Task number %d", i)},
		{Bool: i%2 == 0},
		{Int: int64(i % 5)},
		{Str: fmt.Sprintf("project-%03d", i%100)},
		{Int: 1_700_000_000_000 + int64(i)},
		notes,
	}
}

// encodeTasks returns pre-encoded rows and a segment holding them.
func encodeTasks(t testing.TB, n int, opts EncoderOptions) ([][]byte, []byte, Stats) {
	t.Helper()
	codec, err := rowcodec.New(taskCols)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]byte, n)
	for i := range rows {
		if rows[i], err = codec.Append(nil, taskRow(i)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	e, err := NewEncoder(&buf, "tasks", 3, taskCols, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if err := e.AppendRow(int64(i+1), r); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.Close()
	if err != nil {
		t.Fatal(err)
	}
	return rows, buf.Bytes(), st
}

func wantInvalid(t *testing.T, err error, what string) {
	t.Helper()
	if !syncerr.HasCode(err, syncerr.InvalidRequest) {
		t.Fatalf("%s: got %v, want sync.invalid_request", what, err)
	}
}

func TestEncoderBlocksAndStats(t *testing.T) {
	rows, b, st := encodeTasks(t, 2500, EncoderOptions{})
	if st.Rows != 2500 || st.Blocks != 3 || st.Bytes != int64(len(b)) || st.SegmentID != SegmentID(b) {
		t.Fatalf("stats %+v (len %d, id %s)", st, len(b), SegmentID(b))
	}
	seg, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(seg.Blocks) != 3 || len(seg.Blocks[0]) != 1000 || len(seg.Blocks[2]) != 500 {
		t.Fatalf("block sizes wrong: %d blocks", len(seg.Blocks))
	}
	i := 0
	for _, block := range seg.Blocks {
		for _, r := range block {
			if r.ServerVersion != int64(i+1) || !bytes.Equal(r.Raw, rows[i]) {
				t.Fatalf("row %d differs", i)
			}
			if r.Values[0].Str != fmt.Sprintf("task-%08d", i) {
				t.Fatalf("row %d value %q", i, r.Values[0].Str)
			}
			i++
		}
	}

	// Byte-limited blocks: every block but the last stays within the
	// limit, and rows are never split.
	_, b, st = encodeTasks(t, 500, EncoderOptions{BlockBytes: 1000})
	seg, err = Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Blocks != len(seg.Blocks) || st.Blocks < 20 {
		t.Fatalf("%d blocks", st.Blocks)
	}
	for bi, block := range seg.Blocks {
		size := 0
		for _, r := range block {
			size += 8 + len(r.Raw)
		}
		if size > 1000 {
			t.Fatalf("block %d has %d bytes", bi, size)
		}
	}

	// A row larger than the limit gets a block of its own.
	_, b, st = encodeTasks(t, 3, EncoderOptions{BlockBytes: 10})
	if st.Blocks != 3 {
		t.Fatalf("oversized rows: %d blocks", st.Blocks)
	}
	if err := ValidateStructure(b); err != nil {
		t.Fatal(err)
	}

	// Empty segment: header + end marker.
	var buf bytes.Buffer
	e, _ := NewEncoder(&buf, "empty", 1, taskCols, EncoderOptions{})
	st, err = e.Close()
	if err != nil || st.Rows != 0 || st.Blocks != 0 {
		t.Fatal(st, err)
	}
	seg, err = Decode(buf.Bytes())
	if err != nil || len(seg.Blocks) != 0 || seg.Table != "empty" {
		t.Fatal(seg, err)
	}
}

func TestAppendValuesMatchesAppendRow(t *testing.T) {
	for _, opts := range []EncoderOptions{{}, {BlockBytes: 700}, {BlockRows: 7}} {
		_, want, _ := encodeTasks(t, 300, opts)
		var buf bytes.Buffer
		e, err := NewEncoder(&buf, "tasks", 3, taskCols, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			if err := e.AppendValues(int64(i+1), taskRow(i)); err != nil {
				t.Fatal(err)
			}
		}
		st, err := e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) || st.SegmentID != SegmentID(want) {
			t.Fatalf("opts %+v: AppendValues output differs from AppendRow", opts)
		}
	}
}

func TestEncoderRejects(t *testing.T) {
	var buf bytes.Buffer
	e, err := NewEncoder(&buf, "t", 1, taskCols, EncoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	row := taskRow(1)
	codec := e.Codec()
	raw, _ := codec.Append(nil, row)
	for _, sv := range []int64{0, -1, rowcodec.MaxSafeInt + 1} {
		wantInvalid(t, e.AppendRow(sv, raw), "serverVersion")
		wantInvalid(t, e.AppendValues(sv, row), "serverVersion")
	}
	wantInvalid(t, e.AppendRow(1, raw[:len(raw)-1]), "truncated row")
	wantInvalid(t, e.AppendRow(1, append(raw, 0)), "trailing byte")
	bad := append([]rowcodec.Value(nil), row...)
	bad[0] = rowcodec.Value{Null: true}
	wantInvalid(t, e.AppendValues(1, bad), "NULL id")
	if err := e.AppendRow(rowcodec.MaxSafeInt, raw); err != nil {
		t.Fatal(err)
	}
	st, err := e.Close()
	if err != nil || st.Rows != 1 {
		t.Fatal(st, err)
	}
	if err := e.AppendRow(1, raw); err == nil {
		t.Fatal("append after close accepted")
	}
	if _, err := NewEncoder(&buf, "t\xff", 1, taskCols, EncoderOptions{}); err == nil {
		t.Fatal("invalid UTF-8 table accepted")
	}
	if _, err := NewEncoder(&buf, "t", 1, []rowcodec.Column{{Name: "x", Type: 0}}, EncoderOptions{}); err == nil {
		t.Fatal("tag 0 accepted")
	}
	if _, err := Encode(&Segment{Header: Header{Table: "t", Columns: taskCols}, Blocks: [][]Row{{}}}); err == nil {
		t.Fatal("empty block accepted")
	}

	// Writer errors are sticky and surface.
	boom := errors.New("boom")
	e, err = NewEncoder(&failAfter{n: 1, err: boom}, "t", 1, taskCols, EncoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AppendRow(1, raw); err != nil {
		t.Fatal(err) // buffered, nothing written yet
	}
	if _, err := e.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close: %v", err)
	}
	if err := e.AppendRow(1, raw); !errors.Is(err, boom) {
		t.Fatalf("sticky error: %v", err)
	}
	if _, err := NewEncoder(&failAfter{err: boom}, "t", 1, taskCols, EncoderOptions{}); !errors.Is(err, boom) {
		t.Fatalf("header write error: %v", err)
	}
}

type failAfter struct {
	n   int
	err error
}

// Write succeeds n times, then fails.
func (f *failAfter) Write(p []byte) (int, error) {
	if f.n > 0 {
		f.n--
		return len(p), nil
	}
	return 0, f.err
}

// TestStructuralErrors mutates a valid two-block segment into each §5.2
// structural failure.
func TestStructuralErrors(t *testing.T) {
	_, good, _ := encodeTasks(t, 3, EncoderOptions{BlockRows: 2})
	if err := ValidateStructure(good); err != nil {
		t.Fatal(err)
	}
	seg, _ := Decode(good)
	hdrLen := len(good)
	for _, b := range seg.Blocks {
		hdrLen -= 8
		for _, r := range b {
			hdrLen -= 8 + len(r.Raw)
		}
	}
	hdrLen -= 4 // end marker

	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	typeOff := 8 + 4 + len("tasks") + 4 + 2 + 4 + len("id")
	cases := map[string][]byte{
		"bad magic":          mutate(func(b []byte) []byte { b[3] = '1'; return b }),
		"formatVersion 2":    mutate(func(b []byte) []byte { b[4] = 2; return b }),
		"formatVersion 0":    mutate(func(b []byte) []byte { b[4] = 0; return b }),
		"flags":              mutate(func(b []byte) []byte { b[7] = 0x80; return b }),
		"unknown tag 0":      mutate(func(b []byte) []byte { b[typeOff] = 0; return b }),
		"unknown tag 9":      mutate(func(b []byte) []byte { b[typeOff] = 9; return b }),
		"reserved col flag":  mutate(func(b []byte) []byte { b[typeOff+1] = 2; return b }),
		"nullable flag 3":    mutate(func(b []byte) []byte { b[typeOff+1] = 3; return b }),
		"table not UTF-8":    mutate(func(b []byte) []byte { b[12] = 0xff; return b }),
		"byteLength short":   mutate(func(b []byte) []byte { b[hdrLen+4]--; return b }),
		"byteLength long":    mutate(func(b []byte) []byte { b[hdrLen+4]++; return b }),
		"rowCount high":      mutate(func(b []byte) []byte { b[hdrLen]++; return b }),
		"rowCount low":       mutate(func(b []byte) []byte { b[hdrLen]--; return b }),
		"rowCount huge":      mutate(func(b []byte) []byte { b[hdrLen+3] = 0x7f; return b }),
		"serverVersion 0":    mutate(func(b []byte) []byte { clear(b[hdrLen+8 : hdrLen+16]); return b }),
		"serverVersion neg":  mutate(func(b []byte) []byte { b[hdrLen+15] = 0x80; return b }),
		"serverVersion 2^53": mutate(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[hdrLen+8:], 1<<53); return b }),
		"padding bit":        mutate(func(b []byte) []byte { b[hdrLen+16] |= 0x80; return b }),
		"null non-nullable":  mutate(func(b []byte) []byte { b[hdrLen+16] |= 0x01; return b }),
		"trailing byte":      append(append([]byte(nil), good...), 0),
		"trailing marker":    append(append([]byte(nil), good...), 0, 0, 0, 0),
		"missing end marker": good[:len(good)-4],
		"partial end marker": good[:len(good)-2],
		"empty":              {},
		"header only":        good[:hdrLen],
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(b)
			wantInvalid(t, err, "Decode")
			wantInvalid(t, ValidateStructure(b), "ValidateStructure")
			d := NewDecoder(bytes.NewReader(b), DecoderOptions{})
			for d.Next() {
			}
			wantInvalid(t, d.Err(), "Decoder")
			if e := syncerr.As(err); !strings.HasPrefix(e.Message, "rows segment") {
				t.Fatalf("message %q lacks context", e.Message)
			}
		})
	}
}

// TestEveryPrefixRejected: truncation anywhere is an error, never a panic
// or a silent short segment.
func TestEveryPrefixRejected(t *testing.T) {
	_, good, _ := encodeTasks(t, 5, EncoderOptions{BlockRows: 2})
	for n := 0; n < len(good); n++ {
		b := good[:n]
		if _, err := Decode(b); err == nil {
			t.Fatalf("prefix %d/%d decoded", n, len(good))
		}
		wantInvalid(t, ValidateStructure(b), fmt.Sprint("prefix ", n))
		d := NewDecoder(iotest.OneByteReader(bytes.NewReader(b)), DecoderOptions{})
		for d.Next() {
		}
		wantInvalid(t, d.Err(), fmt.Sprint("stream prefix ", n))
	}
}

func TestDecoderStreaming(t *testing.T) {
	rows, b, _ := encodeTasks(t, 2345, EncoderOptions{})
	for _, r := range []io.Reader{
		bytes.NewReader(b),
		iotest.OneByteReader(bytes.NewReader(b)),
		iotest.HalfReader(bytes.NewReader(b)),
		iotest.DataErrReader(bytes.NewReader(b)),
	} {
		d := NewDecoder(r, DecoderOptions{})
		h, err := d.Header()
		if err != nil || h.Table != "tasks" || h.SchemaVersion != 3 || len(h.Columns) != 7 {
			t.Fatal(h, err)
		}
		if err := CheckColumns(h.Columns, taskCols); err != nil {
			t.Fatal(err)
		}
		i := 0
		var vals []rowcodec.Value
		blocks := map[int]int{}
		for d.Next() {
			if d.ServerVersion() != int64(i+1) || !bytes.Equal(d.Row(), rows[i]) {
				t.Fatalf("row %d differs", i)
			}
			if vals, err = d.Values(vals); err != nil || vals[5].Int != 1_700_000_000_000+int64(i) {
				t.Fatalf("row %d values %v %v", i, vals, err)
			}
			blocks[d.BlockIndex()]++
			i++
		}
		if d.Err() != nil || i != len(rows) || len(blocks) != 3 || blocks[2] != 345 {
			t.Fatalf("err %v, %d rows, blocks %v", d.Err(), i, blocks)
		}
		if n, err := d.NextBlock(); n != 0 || err != io.EOF {
			t.Fatalf("after end: %d %v", n, err)
		}
	}

	// The block limit bounds memory.
	d := NewDecoder(bytes.NewReader(b), DecoderOptions{MaxBlockBytes: 1000})
	for d.Next() {
	}
	wantInvalid(t, d.Err(), "block over limit")
	if !strings.Contains(d.Err().Error(), "limit") {
		t.Fatalf("message: %v", d.Err())
	}

	// Reader errors pass through unchanged.
	boom := errors.New("boom")
	d = NewDecoder(io.MultiReader(bytes.NewReader(b[:100]), iotest.ErrReader(boom)), DecoderOptions{})
	for d.Next() {
	}
	if !errors.Is(d.Err(), boom) {
		t.Fatalf("got %v", d.Err())
	}

	// A block is validated whole before any of its rows is exposed.
	_, two, _ := encodeTasks(t, 4, EncoderOptions{BlockRows: 2})
	bad := append([]byte(nil), two...)
	bad[len(bad)-5] = 0xff // last byte of the last row (notes or updated_at)
	d = NewDecoder(bytes.NewReader(bad), DecoderOptions{})
	seen := 0
	for d.Next() {
		seen++
	}
	if d.Err() == nil {
		t.Skip("mutation happened to stay valid")
	}
	if seen != 2 {
		t.Fatalf("saw %d rows before the failing block, want 2", seen)
	}
}

func TestCheckColumns(t *testing.T) {
	if err := CheckColumns(taskCols, taskCols); err != nil {
		t.Fatal(err)
	}
	mod := func(f func(c []rowcodec.Column) []rowcodec.Column) []rowcodec.Column {
		return f(append([]rowcodec.Column(nil), taskCols...))
	}
	for name, got := range map[string][]rowcodec.Column{
		"fewer":    taskCols[:6],
		"more":     append(append([]rowcodec.Column(nil), taskCols...), rowcodec.Column{Name: "x", Type: 1}),
		"name":     mod(func(c []rowcodec.Column) []rowcodec.Column { c[1].Name = "Title"; return c }),
		"type":     mod(func(c []rowcodec.Column) []rowcodec.Column { c[3].Type = rowcodec.TypeFloat; return c }),
		"nullable": mod(func(c []rowcodec.Column) []rowcodec.Column { c[6].Nullable = false; return c }),
		"order":    mod(func(c []rowcodec.Column) []rowcodec.Column { c[0], c[1] = c[1], c[0]; return c }),
	} {
		if err := CheckColumns(got, taskCols); !syncerr.HasCode(err, syncerr.SchemaMismatch) {
			t.Fatalf("%s: got %v", name, err)
		}
	}
}

func TestRenderDecodesRawRows(t *testing.T) {
	_, b, _ := encodeTasks(t, 4, EncoderOptions{BlockRows: 3})
	seg, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Render(seg)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range seg.Blocks {
		for i := range block {
			block[i].Values = nil
		}
	}
	got, err := Render(seg)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("render from raw differs: %v", err)
	}
	if got, err := RenderBytes(b); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("RenderBytes differs: %v", err)
	}
	if !strings.Contains(string(want), `"notes":null`) || !strings.Contains(string(want), `"type":"boolean"`) {
		t.Fatalf("rendering: %s", want)
	}
}
