package segment

import (
	"strconv"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
)

// Render produces the §11.1 rule 8 debug rendering of seg:
//
//	{"magic":"SSG2","formatVersion":1,"table":…,"schemaVersion":…,
//	 "columns":[{"name":…,"type":…,"nullable":…}],
//	 "blocks":[[{"serverVersion":…,"values":{name→value}}]]}
//
// Values render per rowcodec.RenderValue. Rows whose Values are nil are
// decoded from Raw. The output is compact JSON; it is tooling and vector
// output, never a production path (§11).
func Render(seg *Segment) ([]byte, error) {
	codec, err := rowcodec.New(seg.Columns)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 256)
	out = append(out, `{"magic":"SSG2","formatVersion":`...)
	out = strconv.AppendInt(out, FormatVersion, 10)
	out = append(out, `,"table":`...)
	out = canonjson.AppendString(out, seg.Table)
	out = append(out, `,"schemaVersion":`...)
	out = strconv.AppendInt(out, int64(seg.SchemaVersion), 10)
	out = append(out, `,"columns":[`...)
	for i, c := range seg.Columns {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"name":`...)
		out = canonjson.AppendString(out, c.Name)
		out = append(out, `,"type":`...)
		out = canonjson.AppendString(out, c.Type.String())
		out = append(out, `,"nullable":`...)
		out = strconv.AppendBool(out, c.Nullable)
		out = append(out, '}')
	}
	out = append(out, `],"blocks":[`...)
	var scratch []rowcodec.Value
	for i, block := range seg.Blocks {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '[')
		for j := range block {
			r := &block[j]
			if j > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"serverVersion":`...)
			out = strconv.AppendInt(out, r.ServerVersion, 10)
			out = append(out, `,"values":`...)
			vals := r.Values
			if vals == nil {
				if scratch, err = codec.Decode(r.Raw, scratch); err != nil {
					return nil, rowErr(err, i, j)
				}
				vals = scratch
			}
			if out, err = codec.RenderRow(out, vals); err != nil {
				return nil, rowErr(err, i, j)
			}
			out = append(out, '}')
		}
		out = append(out, ']')
	}
	return append(out, "]}"...), nil
}

// RenderBytes decodes b and renders it (Render).
func RenderBytes(b []byte) ([]byte, error) {
	seg, err := Decode(b)
	if err != nil {
		return nil, err
	}
	return Render(seg)
}
