// Command ssp2 is a developer tool for SSP2 bytes: it renders requests,
// responses and SSG2 rows segments as the canonical JSON of SPEC §11.1 and
// checks that re-encoding reproduces a file byte for byte.
//
//	ssp2 render FILE      print the canonical JSON rendering
//	ssp2 roundtrip FILE   decode, re-encode, exit 1 unless identical
//
// The kind is detected from the magic ("SSP2" envelope, whose msgKind
// byte says request or response; "SSG2" rows segment). On an invalid file
// the tool prints the §10 catalog code and exits 1.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || (args[0] != "render" && args[0] != "roundtrip") {
		fmt.Fprintln(stderr, "usage: ssp2 render FILE | ssp2 roundtrip FILE")
		return 2
	}
	data, err := os.ReadFile(args[1])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	rendered, reencoded, err := decode(data)
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

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
