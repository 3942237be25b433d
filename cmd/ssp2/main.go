// Command ssp2 is a developer tool for SSP2 bytes: it renders requests,
// responses and SSG2 rows segments as the canonical JSON of SPEC §11.1 and
// checks that re-encoding reproduces a file byte for byte.
//
//	ssp2 render [-push MANIFEST] FILE      print the canonical JSON rendering
//	ssp2 roundtrip [-push MANIFEST] FILE   decode, re-encode, exit 1 unless identical
//
// The kind is detected from the magic ("SSP2" envelope of wire version 1,
// 2 or 3, whose msgKind byte says request or response; "SSG2" rows
// segment). A wire-version 3 push payload (a sparse row, §2.4) has no
// magic and no column table: -push names a push/ vector manifest whose
// columns and primaryKey describe it. On an invalid file the tool prints
// the §10 catalog code and exits 1.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var pushManifest string
	if len(args) == 4 && args[1] == "-push" {
		pushManifest = args[2]
		args = []string{args[0], args[3]}
	}
	if len(args) != 2 || (args[0] != "render" && args[0] != "roundtrip") {
		fmt.Fprintln(stderr, "usage: ssp2 render|roundtrip [-push MANIFEST] FILE")
		return 2
	}
	data, err := os.ReadFile(args[1])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	var rendered, reencoded []byte
	if pushManifest != "" {
		codec, pk, merr := loadPushCodec(pushManifest)
		if merr != nil {
			fmt.Fprintln(stderr, merr)
			return 2
		}
		rendered, reencoded, err = decodePush(codec, pk, data)
	} else {
		rendered, reencoded, err = decode(data)
	}
	if err != nil {
		code := "error"
		if se := syncerr.As(err); se != nil {
			code = string(se.Code)
		}
		fmt.Fprintf(stderr, "%s: %v\n", code, err)
		fmt.Fprintln(stdout, code)
		return 1
	}
	switch args[0] {
	case "render":
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, rendered, "", "  "); err != nil {
			fmt.Fprintln(stderr, "render produced invalid JSON:", err)
			return 1
		}
		pretty.WriteByte('\n')
		_, _ = stdout.Write(pretty.Bytes())
	case "roundtrip":
		if !bytes.Equal(reencoded, data) {
			fmt.Fprintf(stderr, "roundtrip mismatch: %d bytes in, %d bytes out (first difference at byte %d)\n", len(data), len(reencoded), firstDiff(data, reencoded))
			return 1
		}
		fmt.Fprintf(stdout, "ok: %d bytes reproduced exactly\n", len(data))
	}
	return 0
}

// decode detects the kind, renders it and re-encodes it.
func decode(data []byte) (rendered, reencoded []byte, err error) {
	switch {
	case bytes.HasPrefix(data, wire.Magic[:]):
		m, err := wire.Decode(data)
		if err != nil {
			return nil, nil, err
		}
		if rendered, err = wire.Render(m); err != nil {
			return nil, nil, err
		}
		reencoded, err = wire.Encode(m)
		return rendered, reencoded, err
	case bytes.HasPrefix(data, segment.Magic[:]):
		s, err := segment.Decode(data)
		if err != nil {
			return nil, nil, err
		}
		if rendered, err = segment.Render(s); err != nil {
			return nil, nil, err
		}
		reencoded, err = segment.Encode(s)
		return rendered, reencoded, err
	}
	return nil, nil, syncerr.New(syncerr.InvalidRequest, "unknown magic: not an SSP2 message or SSG2 segment")
}

// loadPushCodec builds the row codec of a push/ manifest's table.
func loadPushCodec(path string) (*rowcodec.Codec, int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var m struct {
		Columns []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Nullable bool   `json:"nullable"`
		} `json:"columns"`
		PrimaryKey string `json:"primaryKey"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	cols := make([]rowcodec.Column, len(m.Columns))
	pk := -1
	for i, c := range m.Columns {
		t, ok := rowcodec.ParseType(c.Type)
		if !ok {
			return nil, 0, fmt.Errorf("%s: column %q has unknown type %q", path, c.Name, c.Type)
		}
		cols[i] = rowcodec.Column{Name: c.Name, Type: t, Nullable: c.Nullable}
		if c.Name == m.PrimaryKey {
			pk = i
		}
	}
	if pk < 0 {
		return nil, 0, fmt.Errorf("%s: primaryKey %q is not a column", path, m.PrimaryKey)
	}
	codec, err := rowcodec.New(cols)
	return codec, pk, err
}

// decodePush decodes a sparse row, renders it as the push/ vectors do and
// re-encodes it.
func decodePush(codec *rowcodec.Codec, pk int, data []byte) (rendered, reencoded []byte, err error) {
	row, present, err := codec.DecodeSparse(data, pk, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	if rendered, err = codec.RenderSparseDocument(nil, row, present); err != nil {
		return nil, nil, err
	}
	reencoded, err = codec.AppendSparse(nil, row, present)
	return rendered, reencoded, err
}

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
